"""A local Kubernetes (control plane, kwok nodes, a real kubelet node) for development and tests."""
