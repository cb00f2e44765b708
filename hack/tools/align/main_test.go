package main

import (
	"reflect"
	"testing"
)

func mod(path, version string) Module { return Module{Path: path, Version: version} }

func replaced(path, version, by string) Module {
	return Module{Path: path, Version: version, Replace: &Module{Path: path, Version: by}}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name    string
		members map[string][]Module
		hold    map[string]bool
		want    []Edit
	}{
		{
			name: "the lower member is raised to the higher version",
			members: map[string][]Module{
				"helm":       {mod("k8s.io/api", "v0.37.1"), mod("golang.org/x/net", "v0.60.0")},
				"prometheus": {mod("k8s.io/api", "v0.37.1"), mod("golang.org/x/net", "v0.61.0")},
			},
			want: []Edit{{Member: "helm", Path: "golang.org/x/net", Version: "v0.61.0"}},
		},
		{
			name: "a module only one member builds with is left alone",
			members: map[string][]Module{
				"helm":       {mod("helm.sh/helm/v4", "v4.3.1")},
				"prometheus": {mod("github.com/aws/aws-sdk-go-v2", "v1.47.3")},
			},
		},
		{
			name: "a held module is never edited",
			members: map[string][]Module{
				"helm":        {mod("helm.sh/helm/v4", "v4.3.1")},
				"helm-argocd": {mod("helm.sh/helm/v4", "v4.2.1")},
			},
			hold: map[string]bool{"helm.sh/helm/v4": true},
		},
		{
			name: "pseudo-versions and tags compare by semver",
			members: map[string][]Module{
				"argo-cd": {mod("google.golang.org/protobuf", "v1.36.12-0.20260120151049-f2248ac996af")},
				"helm":    {mod("google.golang.org/protobuf", "v1.36.12")},
			},
			want: []Edit{{Member: "argo-cd", Path: "google.golang.org/protobuf", Version: "v1.36.12"}},
		},
		{
			name: "a staging module required at v0.0.0 and replaced by its tag is required at the tag",
			members: map[string][]Module{
				"kubernetes": {replaced("k8s.io/api", "v0.0.0", "v0.37.2")},
				"helm":       {mod("k8s.io/api", "v0.37.1")},
			},
			want: []Edit{
				{Member: "helm", Path: "k8s.io/api", Version: "v0.37.2"},
				{Member: "kubernetes", Path: "k8s.io/api", Version: "v0.37.2", Replace: true},
			},
		},
		{
			name: "an upstream replace is raised within its minor",
			members: map[string][]Module{
				"argo-cd": {replaced("k8s.io/client-go", "v0.36.1", "v0.36.1")},
				"flux":    {mod("k8s.io/client-go", "v0.36.2")},
			},
			want: []Edit{{Member: "argo-cd", Path: "k8s.io/client-go", Version: "v0.36.2", Replace: true}},
		},
		{
			name: "an upstream replace to another minor is kept; the others still align",
			members: map[string][]Module{
				"argo-cd": {replaced("golang.org/x/tools", "v0.35.0", "v0.35.0")},
				"flux":    {mod("golang.org/x/tools", "v0.40.0")},
				"kwok":    {mod("golang.org/x/tools", "v0.38.0")},
			},
			want: []Edit{{Member: "kwok", Path: "golang.org/x/tools", Version: "v0.40.0"}},
		},
		{
			name: "a module replaced by another path is the member's own",
			members: map[string][]Module{
				"a": {{Path: "example.com/x", Version: "v1.0.0", Replace: &Module{Path: "example.com/fork", Version: "v1.2.0"}}},
				"b": {mod("example.com/x", "v1.1.0")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plan(tt.members, tt.hold)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("plan() = %+v, want %+v", got, tt.want)
			}
		})
	}
}
