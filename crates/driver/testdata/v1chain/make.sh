#!/bin/bash
# Writes the v1-chain test certificates (DER) into $1.
out=$1; work=$(mktemp -d); cd $work
EC="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"; D=36500
openssl req -new -x509 $EC -keyout root.key -out root.crt -days $D -subj "/CN=pgyard v1 test root" 2>/dev/null || exit 1
openssl req -new -x509 $EC -keyout other-root.key -out other-root.crt -days $D -subj "/CN=pgyard v1 test root" 2>/dev/null || exit 1
csr() { openssl req -new $EC -keyout $1.key -out $1.csr -subj "/CN=$2" 2>/dev/null || exit 1; }
# sign NAME CSR CA [EXTFILE]: NAME.crt from CSR.csr by CA, NAME.key a copy of CSR.key
sign() {
  local ext=(); [ -n "$4" ] && ext=(-extfile $4)
  openssl x509 -req -in $2.csr -CA $3.crt -CAkey $3.key -set_serial $RANDOM$RANDOM -days $D "${ext[@]}" -out $1.crt 2>/dev/null || { echo "failed: $1"; exit 1; }
  cp $2.key $1.key
}
printf "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n" > ca.ext
printf "basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n" > pathlen0.ext
printf "keyUsage=digitalSignature\n" > notca.ext
printf "basicConstraints=critical,CA:TRUE\nextendedKeyUsage=clientAuth\n" > ekuclient.ext
printf "basicConstraints=critical,CA:TRUE\nnameConstraints=critical,permitted;DNS:localhost\n" > nc.ext
printf "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,digitalSignature\n" > nosign.ext
csr leaf localhost; csr int "pgyard v1 test intermediate"; csr int2 "pgyard v1 test second intermediate"
sign leaf leaf root
sign int int root ca.ext; sign leaf-via-int leaf int
sign int-notca int root notca.ext; sign leaf-via-notca leaf int-notca
sign int-v1 int root; sign leaf-via-v1int leaf int-v1
sign int-pathlen0 int root pathlen0.ext; sign int2-under-pathlen0 int2 int-pathlen0 ca.ext; sign leaf-via-pathlen0 leaf int2-under-pathlen0
sign int-ekuclient int root ekuclient.ext; sign leaf-via-ekuclient leaf int-ekuclient
sign int-nc int root nc.ext; sign leaf-via-nc leaf int-nc
sign int-nosign int root nosign.ext; sign leaf-via-nosign leaf int-nosign
openssl x509 -req -in leaf.csr -signkey leaf.key -days $D -out self-v1.crt 2>/dev/null || exit 1
# Two CAs that sign each other: cross-a (subject A, issued by B), cross-b (subject B, issued
# by A), and a leaf issued by A.
openssl req -new -x509 $EC -keyout b.key -out b.crt -days $D -subj "/CN=pgyard cross B" -addext "basicConstraints=critical,CA:TRUE" 2>/dev/null || exit 1
csr a "pgyard cross A"; csr bb "pgyard cross B"; cp b.key bb.key
sign cross-a a b ca.ext; sign cross-b bb cross-a ca.ext; sign leaf-via-cross leaf cross-a
rm b.crt
mkdir -p $out
for f in *.crt; do openssl x509 -in $f -outform DER -out $out/${f%.crt}.der || exit 1; done
rm -rf $work
