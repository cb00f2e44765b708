//go:build e2e

package e2e

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var metav1GetOptions = metav1.GetOptions{}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
