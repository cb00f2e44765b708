package workload

import (
	appsv1 "k8s.io/api/apps/v1"
)

// Role is what a ReplicaSet is to its workload right now.
type Role string

const (
	// RoleStable is a Rollout's status.stableRS: what runs once a canary is aborted.
	RoleStable Role = "stable"
	// RoleCanary is a Rollout's status.currentPodHash while it is not the stable one (for a blue-green
	// strategy, the preview).
	RoleCanary Role = "canary"
	// RoleCurrent is the ReplicaSet matching a Deployment's pod template.
	RoleCurrent Role = "current"
	// RoleOld is any other ReplicaSet: kept for rollback until revisionHistoryLimit prunes it.
	RoleOld Role = "old"
)

// RoleOf says what rs is to the workload. Unlike Current it does not wait for the controller to observe
// the latest spec: a Rollout's roles are its controller's status as it stands (what `kubectl argo
// rollouts get` shows), a Deployment's current ReplicaSet is the one matching its template.
func (r *Resolved) RoleOf(rs *appsv1.ReplicaSet) Role {
	if r.Ref.Kind == Rollout {
		hash := rs.Labels[RolloutHashLabel]
		switch {
		case r.Rollout == nil || hash == "":
			return RoleOld
		case hash == r.Rollout.Status.StableRS:
			return RoleStable
		case hash == r.Rollout.Status.CurrentPodHash:
			return RoleCanary
		}
		return RoleOld
	}
	if d := r.Deployment; d != nil && runsTemplate(rs, d) {
		return RoleCurrent
	}
	return RoleOld
}
