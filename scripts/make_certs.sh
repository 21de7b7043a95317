#!/usr/bin/env bash
# Makes a self-signed CA and a learner certificate for TLS between actors and
# the learner, plus a random token:
#   scripts/make_certs.sh OUT_DIR LEARNER_NAME [MORE_NAMES_OR_IPS...]
#   scripts/make_certs.sh certs learner.default.svc 10.0.0.5
# Writes OUT_DIR/ca.pem (give it to actors: --tls_ca), OUT_DIR/learner.pem
# and OUT_DIR/learner.key (the learner: --tls_cert, --tls_key) and
# OUT_DIR/token (both sides: --token_file, or SEED_RL_TOKEN). The learner
# certificate is valid for every name/IP given, and for localhost/127.0.0.1.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OUT_DIR LEARNER_NAME [MORE_NAMES_OR_IPS...]" >&2
  exit 2
fi
out="$1"; shift
mkdir -p "$out"
umask 077
san="DNS:localhost,IP:127.0.0.1"
for name in "$@"; do
  if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then
    san="$san,IP:$name"
  else
    san="$san,DNS:$name"
  fi
done
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=seed_rl CA" \
  -keyout "$out/ca.key" -out "$out/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=$1" \
  -keyout "$out/learner.key" -out "$out/learner.csr" 2>/dev/null
openssl x509 -req -in "$out/learner.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
  -CAcreateserial -days 3650 -out "$out/learner.pem" \
  -extfile <(printf "subjectAltName=%s\n" "$san") 2>/dev/null
rm -f "$out/learner.csr" "$out/ca.srl"
[[ -f "$out/token" ]] || openssl rand -hex 32 > "$out/token"
echo "wrote $out/{ca.pem,learner.pem,learner.key,token} (SAN: $san)"
