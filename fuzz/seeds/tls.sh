#!/bin/bash
# Writes the seed corpora of `tls_certificates` and `tls_key_file` into fuzz/corpus/ from the
# driver's committed test certificates and keys, and from a few certificates made here with
# OpenSSL for what those lack (subjectAltNames of every kind, Common Names, keyUsage,
# extKeyUsage, name constraints, an unknown critical extension, GeneralizedTime, RSA).
# Input formats: see pgyard_driver::fuzzing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
certs=$root/fuzz/corpus/tls_certificates; keys=$root/fuzz/corpus/tls_key_file
mkdir -p "$certs" "$keys"
v1=$root/crates/driver/testdata/v1chain
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# frame STEER FILE...: the steering byte, then each file behind its two-byte length.
frame() {
  local steer=$1; shift
  printf "\\x$(printf %02x "$steer")"
  for f in "$@"; do
    local n; n=$(stat -c %s "$f")
    printf "\\x$(printf %02x $((n >> 8)))\\x$(printf %02x $((n & 255)))"
    cat "$f"
  done
}
put() { local out=$1; shift; frame "$@" > "$work/seed"; cp "$work/seed" "$certs/$out"; }

put v1-leaf-root 1 "$v1/leaf.der" "$v1/root.der"
put v1-via-int 1 "$v1/leaf-via-int.der" "$v1/int.der" "$v1/root.der"
put v1-via-pathlen0 1 "$v1/leaf-via-pathlen0.der" "$v1/int2-under-pathlen0.der" "$v1/int-pathlen0.der" "$v1/root.der"
put v1-via-nc 1 "$v1/leaf-via-nc.der" "$v1/int-nc.der" "$v1/root.der"
put v1-via-ekuclient 5 "$v1/leaf-via-ekuclient.der" "$v1/int-ekuclient.der" "$v1/root.der"
put v1-via-cross 2 "$v1/leaf-via-cross.der" "$v1/cross-a.der" "$v1/cross-b.der" "$v1/root.der" "$v1/other-root.der"
put v1-self 1 "$v1/self-v1.der" "$v1/self-v1.der"

cd "$work"
EC="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
ext() { printf "%b" "$1" > "$2"; }
ext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1,email:a@example.com,URI:https://example.com/,DNS:*.example.com\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n" leaf.ext
ext "basicConstraints=critical,CA:TRUE,pathlen:1\nkeyUsage=critical,keyCertSign,cRLSign\nnameConstraints=critical,permitted;DNS:.example.com\n" ca.ext
ext "basicConstraints=critical,CA:TRUE,pathlen:200\nkeyUsage=keyCertSign\nextendedKeyUsage=serverAuth\n1.2.3.4.5=critical,DER:0500\n" odd.ext
ext "subjectAltName=critical,DNS:only.example.com,IP:10.0.0.1\n" sanonly.ext
openssl req -new -x509 $EC -keyout ca.key -out ca.pem -days 3650 -subj "/O=pgyard/CN=seed root" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
sign() {  # sign NAME SUBJECT EXTFILE DAYS [KEYOPTS]
  openssl req -new ${5:-$EC} -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial 7 -days "$4" -extfile "$3" -out "$1.pem" 2>/dev/null
  openssl x509 -in "$1.pem" -outform DER -out "$1.der"
}
sign leaf "/C=DE/CN=localhost/CN=second" leaf.ext 365
sign int "/CN=seed intermediate" ca.ext 365
sign odd "/CN=odd" odd.ext 365
sign sanonly "/" sanonly.ext 365
sign late "/CN=late.example.com" leaf.ext 20000
sign rsa "/CN=rsa" leaf.ext 365 "-newkey rsa:2048 -nodes"
openssl x509 -in ca.pem -outform DER -out ca.der
put v3-leaf-root 1 leaf.der ca.der
put v3-leaf-int 1 leaf.der int.der ca.der
put v3-odd 0 odd.der
put v3-sanonly 1 sanonly.der ca.der
put v3-late 1 late.der ca.der
put v3-rsa 9 rsa.der ca.der

# Keys: the flag byte (1: a pass phrase follows, behind its length byte), then the file.
for f in "$root"/crates/driver/testdata/keys/*; do
  name=$(basename "$f")
  { printf '\x00'; cat "$f"; } > "$keys/clear-$name"
  { printf '\x01\x03pw1'; cat "$f"; } > "$keys/pw1-$name"
done
