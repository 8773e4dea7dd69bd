#!/bin/bash
# A CA, serving and client certificates, the service-account key pair and one kubeconfig per component.
# usage: pki.sh DIR NODE_NAME NODE_IP APISERVER_URL        (called by ignite_tf_dev.k8s.cluster; skipped when DIR/ca.crt exists)
set -euo pipefail
D=$1 NODE=$2 IP=$3 URL=$4
[ -f "$D/ca.crt" ] && exit 0
rm -rf "$D.tmp" && mkdir -p "$D.tmp" && cd "$D.tmp"
openssl genrsa -out ca.key 2048 2>/dev/null
openssl req -x509 -new -nodes -key ca.key -subj "/CN=ignite-tf-local-ca" -days 3650 -out ca.crt
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
cert() {  # file CN O SAN(empty: client only)
  local f=$1 subj="/CN=$2"; [ -n "$3" ] && subj="/O=$3/CN=$2"
  openssl genrsa -out "$f.key" 2048 2>/dev/null
  openssl req -new -key "$f.key" -subj "$subj" -out "$f.csr"
  if [ -n "$4" ]; then printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$4" > "$f.ext"
  else printf 'extendedKeyUsage=clientAuth\n' > "$f.ext"; fi
  openssl x509 -req -in "$f.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$f.ext" \
    -out "$f.crt" 2>/dev/null
  rm -f "$f.csr" "$f.ext"
}
svc=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
cert apiserver kube-apiserver "" "DNS:localhost,$svc,IP:127.0.0.1,IP:10.96.0.1,IP:$IP"
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
cert kubelet "system:node:$NODE" system:nodes "DNS:$NODE,DNS:localhost,IP:127.0.0.1,IP:$IP"
cert kwok-server kwok-server "" "DNS:localhost,IP:127.0.0.1"
cert admin admin system:masters ""
cert scheduler system:kube-scheduler "" ""
cert controller-manager system:kube-controller-manager "" ""
cert kube-proxy system:kube-proxy "" ""
cert kwok kwok-controller system:masters ""
for u in admin scheduler controller-manager kubelet kube-proxy kwok; do
  cat > "$u.kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: ignite-tf-local
  cluster: {server: "$URL", certificate-authority: "$D/ca.crt"}
users:
- name: $u
  user: {client-certificate: "$D/$u.crt", client-key: "$D/$u.key"}
contexts:
- name: ignite-tf-local
  context: {cluster: ignite-tf-local, user: $u}
current-context: ignite-tf-local
EOK
done
chmod 600 ./*.key
cd .. && mv "$D.tmp" "$D"
