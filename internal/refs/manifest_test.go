package refs

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestUsesVolumePluginSecretsAndImagePullSecrets(t *testing.T) {
	ref := &corev1.LocalObjectReference{Name: "creds"}
	spec := &corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "a", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-creds"}}}},
			{Name: "b", VolumeSource: corev1.VolumeSource{AzureFile: &corev1.AzureFileVolumeSource{SecretName: "azure"}}},
			{Name: "c", VolumeSource: corev1.VolumeSource{CephFS: &corev1.CephFSVolumeSource{SecretRef: ref}}},
			{Name: "d", VolumeSource: corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{SecretRef: ref}}},
			{Name: "e", VolumeSource: corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{SecretRef: ref}}},
			{Name: "f", VolumeSource: corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{SecretRef: ref}}},
			{Name: "g", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "no-secret"}}},
		},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}},
	}
	var got []string
	for _, u := range Uses(spec) {
		got = append(got, u.Ref.String()+" @ "+u.Path.String())
	}
	want := []string{
		"Secret/csi-creds @ volumes[0].csi.nodePublishSecretRef.name",
		"Secret/azure @ volumes[1].azureFile.secretName",
		"Secret/creds @ volumes[2].cephfs.secretRef.name",
		"Secret/creds @ volumes[3].rbd.secretRef.name",
		"Secret/creds @ volumes[4].iscsi.secretRef.name",
		"Secret/creds @ volumes[5].flexVolume.secretRef.name",
		"Secret/registry @ imagePullSecrets[0].name",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Uses =\n%q\nwant\n%q", got, want)
	}
}

func TestManifestUses(t *testing.T) {
	tests := []struct {
		name, apiVersion, kind, manifest string
		want                             []string // "Kind/name @ path [outside] [ns]"
	}{
		{"a Deployment's pod template", "apps/v1", "Deployment",
			`{"spec":{"template":{"spec":{"containers":[{"name":"c","envFrom":[{"configMapRef":{"name":"cm"}}]}]}}}}`,
			[]string{"ConfigMap/cm @ spec.template.spec.containers[0].envFrom[0].configMapRef.name"}},
		{"an AnalysisTemplate's job metrics and args", "argoproj.io/v1alpha1", "AnalysisTemplate",
			`{"spec":{"args":[{"name":"a","value":"x"},{"name":"token","valueFrom":{"secretKeyRef":{"name":"tok","key":"k"}}}],
			  "metrics":[{"name":"web","provider":{"web":{"url":"x"}}},
			             {"name":"job","provider":{"job":{"spec":{"template":{"spec":{"volumes":[{"name":"v","configMap":{"name":"analysis-cm"}}]}}}}}}]}}`,
			[]string{"ConfigMap/analysis-cm @ spec.metrics[1].provider.job.spec.template.spec.volumes[0].configMap.name",
				"Secret/tok @ spec.args[1].valueFrom.secretKeyRef.name"}},
		{"an Experiment's templates", "argoproj.io/v1alpha1", "Experiment",
			`{"spec":{"templates":[{"name":"a","template":{"spec":{"containers":[{"name":"c","env":[{"name":"E","valueFrom":{"configMapKeyRef":{"name":"exp-cm","key":"k"}}}]}]}}},{"name":"b"}]}}`,
			[]string{"ConfigMap/exp-cm @ spec.templates[0].template.spec.containers[0].env[0].valueFrom.configMapKeyRef.name"}},
		{"an Ingress's TLS Secret: outside", "networking.k8s.io/v1", "Ingress",
			`{"spec":{"tls":[{"hosts":["a"],"secretName":"tls"}]}}`,
			[]string{"Secret/tls @ spec.tls[0].secretName outside"}},
		{"a ServiceAccount's Secrets: outside", "v1", "ServiceAccount",
			`{"secrets":[{"name":"token"}],"imagePullSecrets":[{"name":"registry"}]}`,
			[]string{"Secret/token @ secrets[0].name outside", "Secret/registry @ imagePullSecrets[0].name outside"}},
		{"a PersistentVolume's CSI Secret, in its namespace: outside", "v1", "PersistentVolume",
			`{"spec":{"csi":{"driver":"d","volumeHandle":"h","nodePublishSecretRef":{"name":"pv-creds","namespace":"prod"}}}}`,
			[]string{"Secret/pv-creds @ spec.csi.nodePublishSecretRef.name outside prod"}},
		{"a Gateway's certificate: outside", "gateway.networking.k8s.io/v1", "Gateway",
			`{"spec":{"listeners":[{"name":"https","tls":{"certificateRefs":[{"name":"gw-tls"},{"kind":"ConfigMap","name":"not-a-secret"}]}}]}}`,
			[]string{"Secret/gw-tls @ spec.listeners[0].tls.certificateRefs[0].name outside"}},
		{"a kind that names nothing", "v1", "Service", `{"spec":{"selector":{"app":"x"}}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uses, err := ManifestUses(tt.apiVersion, tt.kind, []byte(tt.manifest))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, u := range uses {
				s := u.Ref.String() + " @ " + u.Path.String()
				if u.Outside {
					s += " outside"
				}
				if u.Namespace != "" {
					s += " " + u.Namespace
				}
				got = append(got, s)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ManifestUses =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
