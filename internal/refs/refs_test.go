package refs

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func cmVolume(name string) corev1.Volume {
	return corev1.Volume{Name: "v-" + name, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
}

func secretVolume(name string) corev1.Volume {
	return corev1.Volume{Name: "v-" + name, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: name}}}
}

func projected(sources ...corev1.VolumeProjection) corev1.Volume {
	return corev1.Volume{Name: "projected", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}
}

func projCM(name string) corev1.VolumeProjection {
	return corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func projSecret(name string) corev1.VolumeProjection {
	return corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func envFromCM(name string) corev1.EnvFromSource {
	return corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func envFromSecret(name string) corev1.EnvFromSource {
	return corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func envCMKey(name string) corev1.EnvVar {
	return corev1.EnvVar{Name: "E", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k"}}}
}

func envSecretKey(name string) corev1.EnvVar {
	return corev1.EnvVar{Name: "E", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "k"}}}
}

func TestUses(t *testing.T) {
	tests := []struct {
		name string
		spec *corev1.PodSpec
		want []string // "Kind/name @ path"
	}{
		{name: "nil spec"},
		{name: "no config", spec: &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}}},
		{
			name: "plain volumes",
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("a"), secretVolume("s")}},
			want: []string{"ConfigMap/a @ volumes[0].configMap.name", "Secret/s @ volumes[1].secret.secretName"},
		},
		{
			name: "projected sources, the original chart's layout",
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{projected(projCM("demo-cm-1"), projSecret("s"))}},
			want: []string{
				"ConfigMap/demo-cm-1 @ volumes[0].projected.sources[0].configMap.name",
				"Secret/s @ volumes[0].projected.sources[1].secret.name",
			},
		},
		{
			name: "envFrom and env keyRefs in init and app containers",
			spec: &corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "i", EnvFrom: []corev1.EnvFromSource{envFromSecret("init-s")}}},
				Containers: []corev1.Container{{
					Name:    "c",
					EnvFrom: []corev1.EnvFromSource{envFromCM("a")},
					Env:     []corev1.EnvVar{{Name: "plain", Value: "x"}, envCMKey("b"), envSecretKey("c")},
				}},
			},
			want: []string{
				"Secret/init-s @ initContainers[0].envFrom[0].secretRef.name",
				"ConfigMap/a @ containers[0].envFrom[0].configMapRef.name",
				"ConfigMap/b @ containers[0].env[1].valueFrom.configMapKeyRef.name",
				"Secret/c @ containers[0].env[2].valueFrom.secretKeyRef.name",
			},
		},
		{
			name: "empty names are ignored",
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume(""), projected(projCM(""))}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, u := range Uses(tt.spec) {
				got = append(got, u.Ref.String()+" @ "+u.Path.String())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Uses() =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestFromPodSpecDeduplicates(t *testing.T) {
	spec := &corev1.PodSpec{
		Volumes:    []corev1.Volume{cmVolume("a"), projected(projCM("a"), projSecret("a"))},
		Containers: []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{envFromCM("a")}}},
	}
	got := FromPodSpec(spec).Sorted()
	want := []Ref{{ConfigMap, "a"}, {Secret, "a"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// What containers read, per object: keys where every use names keys, whole where one use reads it
// whole; an image pull Secret, a volume plugin's Secret and a volume no container mounts are read by
// no container. Optional where every use is; data only where every use is env or envFrom.
func TestReads(t *testing.T) {
	items := func(keys ...string) []corev1.KeyToPath {
		var out []corev1.KeyToPath
		for _, k := range keys {
			out = append(out, corev1.KeyToPath{Key: k, Path: k})
		}
		return out
	}
	cmItems := cmVolume("vol-items")
	cmItems.ConfigMap.Items = items("b.conf", "a.conf")
	secretItems := secretVolume("tls")
	secretItems.Secret.Items = items("tls.crt")
	projItems := projCM("proj-items")
	projItems.ConfigMap.Items = items("x")
	keyed := func(name, key string) corev1.EnvVar {
		e := envCMKey(name)
		e.ValueFrom.ConfigMapKeyRef.Key = key
		return e
	}
	yes := true
	optional := cmVolume("opt-volume")
	optional.ConfigMap.Optional = &yes
	optionalEnv := corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "opt-env"}, Optional: &yes}}
	csi := corev1.Volume{Name: "store", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io",
		NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-creds"}}}}
	mounts := func(volumes ...string) []corev1.VolumeMount {
		var out []corev1.VolumeMount
		for _, v := range volumes {
			out = append(out, corev1.VolumeMount{Name: v, MountPath: "/" + v})
		}
		return out
	}
	spec := &corev1.PodSpec{
		Volumes: []corev1.Volume{cmItems, secretItems, projected(projItems, projCM("proj-whole")), cmVolume("mixed"), cmVolume("unmounted"),
			optional, csi},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
		InitContainers:   []corev1.Container{{Name: "i", Env: []corev1.EnvVar{keyed("env-keys", "z")}, VolumeMounts: mounts("v-opt-volume")}},
		Containers: []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{envFromSecret("env-whole"), optionalEnv},
			Env:          []corev1.EnvVar{keyed("env-keys", "y"), keyed("env-keys", "z"), keyed("mixed", "k"), envSecretKey("sk")},
			VolumeMounts: mounts("v-vol-items", "v-tls", "projected", "v-mixed", "store")}},
	}
	var got []string
	for _, r := range Reads(spec) {
		s := r.String()
		if r.Optional {
			s += " optional"
		}
		if r.DataOnly {
			s += " data only"
		}
		got = append(got, s)
	}
	want := []string{
		"ConfigMap/env-keys[y,z] data only", // two containers' keyRefs, one key twice
		"ConfigMap/mixed",                   // a keyRef, and a volume without items: whole
		"ConfigMap/opt-env optional data only",
		"ConfigMap/opt-volume optional", // mounted by the init container
		"ConfigMap/proj-items[x]",       // a projected source with items
		"ConfigMap/proj-whole",          // a projected source without
		"ConfigMap/vol-items[a.conf,b.conf]",
		"Secret/env-whole data only", // envFrom
		"Secret/sk[k] data only",     // secretKeyRef
		"Secret/tls[tls.crt]",        // a Secret volume with items
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Reads() =\n%q\nwant\n%q (no registry, csi-creds or unmounted: read by no container)", got, want)
	}
	if !FromPodSpec(spec).Has(Ref{Secret, "registry"}) {
		t.Error("FromPodSpec must still list the image pull Secret: attach and in-use protection keep it")
	}
}

// An ephemeral container (kubectl debug) reading config: listed, so that what uses the object counts
// it, but never where pinning rewrites (it is added by an update no admission of pinning sees) nor
// among what the workload's containers read.
func TestUsesListsEphemeralContainersNeverToRewrite(t *testing.T) {
	spec := &corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app"}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
			Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "token"}, Key: "t"}}}},
		}}},
	}
	uses := Uses(spec)
	var paths []string
	for _, u := range uses {
		paths = append(paths, u.Kind.Resource()+" "+u.Path.String())
		if u.Path.InVolumesOrEnv() || u.Path.InEnv() {
			t.Errorf("%s: an ephemeral container's reference counts as one pinning rewrites", u.Path)
		}
	}
	want := []string{"configmaps ephemeralContainers[0].envFrom[0].configMapRef.name", "secrets ephemeralContainers[0].env[0].valueFrom.secretKeyRef.name"}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("uses %v, want %v", paths, want)
	}
	if set := FromPodSpec(spec); !set.Has(Ref{Kind: ConfigMap, Name: "app-config"}) || !set.Has(Ref{Kind: Secret, Name: "token"}) {
		t.Errorf("FromPodSpec %v: the pod uses what its ephemeral container reads", set.Sorted())
	}
	if r := Reads(spec); len(r) != 0 {
		t.Errorf("Reads %v: an ephemeral container is not what the workload's containers read", r)
	}
}
