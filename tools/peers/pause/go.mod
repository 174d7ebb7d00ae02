// The pod sandbox's pause process for the node image (registry.k8s.io/pause:3.10.1, the tag
// kubeadm v1.35 pins). Test tooling only; capstan itself is Rust.
module capstan.test/peers/pause

go 1.26
