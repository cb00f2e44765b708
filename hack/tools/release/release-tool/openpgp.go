package main

import (
	"bytes"
	"crypto"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// openPGPKey writes a new OpenPGP key pair: the secret key (a keyring sign-helm-plugin and `helm plugin
// package --sign` read) and the public key (the keyring `helm plugin install --keyring` verifies
// with), both armored, unencrypted. For throwaway keys (the e2e tests, a loopback release); a project
// key is made once with gpg (docs/operations.md, Releases) and kept secret.
func openPGPKey(args []string) error {
	fs := flag.NewFlagSet("openpgp-key", flag.ExitOnError)
	name := fs.String("name", "", "the key's user name")
	email := fs.String("email", "", "the key's e-mail address")
	secretOut := fs.String("secret-out", "", "where to write the secret key (armored)")
	publicOut := fs.String("public-out", "", "where to write the public key (armored)")
	_ = fs.Parse(args)
	if *name == "" || *secretOut == "" || *publicOut == "" {
		return errors.New("openpgp-key: -name, -secret-out and -public-out are required")
	}
	e, err := openpgp.NewEntity(*name, "", *email, &packet.Config{DefaultHash: crypto.SHA512, Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		return err
	}
	var secret, public bytes.Buffer
	if err := armored(&secret, openpgp.PrivateKeyType, func(w *bytes.Buffer) error { return e.SerializePrivate(w, nil) }); err != nil {
		return err
	}
	if err := armored(&public, openpgp.PublicKeyType, func(w *bytes.Buffer) error { return e.Serialize(w) }); err != nil {
		return err
	}
	if err := os.WriteFile(*secretOut, secret.Bytes(), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(*publicOut, public.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("FINGERPRINT=%X\n", e.PrimaryKey.Fingerprint)
	return nil
}

func armored(out *bytes.Buffer, blockType string, write func(*bytes.Buffer) error) error {
	var raw bytes.Buffer
	if err := write(&raw); err != nil {
		return err
	}
	w, err := armor.Encode(out, blockType, nil)
	if err != nil {
		return err
	}
	if _, err := w.Write(raw.Bytes()); err != nil {
		return err
	}
	return w.Close()
}
