// Command helm-plugin packs the Helm 4 post-renderer plugin (deploy/helm-plugin) with a
// configmap-attacher binary into <out>/configmap-attacher-<version>.tgz and prints that path
// (`make helm-plugin`; a release signs the package). With -dir it also writes the same files as the
// directory <out>/configmap-attacher, which a development build installs unsigned (`helm plugin
// install <that directory>`). The version is the binary's, as SemVer.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/configmap-attacher/configmap-attacher/internal/helmplugin"
)

func main() {
	src := flag.String("plugin", "deploy/helm-plugin", "the plugin's source directory (plugin.yaml)")
	bin := flag.String("binary", "bin/configmap-attacher", "the configmap-attacher binary to pack (built for the platform it will run on)")
	out := flag.String("out", "_output/helm-plugin", "where to write the package")
	ver := flag.String("version", "", "the binary's version, as it was stamped; empty: run the binary to ask it (a binary built for another platform cannot be asked: make release passes it)")
	dir := flag.Bool("dir", false, "also write the plugin as the directory <out>/configmap-attacher (helm plugin install <directory>: a development install)")
	flag.Parse()
	path, err := helmplugin.Pack(context.Background(), *src, *bin, *ver, *out)
	if err == nil && *dir {
		_, err = helmplugin.Unpacked(context.Background(), *src, *bin, *ver, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helm-plugin:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
