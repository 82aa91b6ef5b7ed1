#!/usr/bin/env bash
# Builds a minimal root filesystem for a container image from Debian packages, with no
# image registry: the dependency closure of the packages named, fetched with apt-get
# and unpacked (no maintainer scripts run; the images' packages need none, and what
# ca-certificates' would do is done here: the bundle of the certificates it ships).
#   debian-rootfs.sh OUT_DIR PACKAGE...
set -euo pipefail
out=$1
shift
# Not needed to run Python or g++, and large: package tooling, perl, sanitizer
# runtimes, Kerberos and RPC libraries.
exclude='perl|perl-base|perl-modules-[0-9.]+|libperl[0-9.]+|dpkg|debconf|install-info|tar|debianutils|mime-support|mailcap|media-types|readline-common|libdb5\.3|libgdbm[a-z0-9-]*|libasan[0-9]+|liblsan[0-9]+|libtsan[0-9]+|libubsan[0-9]+|libhwasan[0-9]+|libgprofng[0-9]+|libgssapi-krb5-2|libk5crypto3|libkrb5-3|libkrb5support0|libkeyutils1|libcom-err2|libnsl2|libnsl-dev|libtirpc[0-9]+|libtirpc-common|libtirpc-dev|rpcsvc-proto'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" | grep -v '^ ' | grep -v '^<' | sort -u | grep -vxE "$exclude"
}
packages=$(closure "$@")
if [ -z "$packages" ]; then
  apt-get update -qq
  packages=$(closure "$@")
fi
# shellcheck disable=SC2086
(cd "$work" && { apt-get download -qq -o APT::Sandbox::User=root $packages 2>/dev/null ||
  { apt-get update -qq && apt-get download -qq -o APT::Sandbox::User=root $packages; }; })
rm -rf "$out"
mkdir -p "$out"/usr/bin "$out"/usr/lib "$out"/usr/lib64 "$out"/usr/sbin \
  "$out"/etc "$out"/tmp "$out"/proc "$out"/dev "$out"/sys
chmod 1777 "$out"/tmp
for dir in bin lib lib64 sbin; do ln -s "usr/$dir" "$out/$dir"; done
for deb in "$work"/*.deb; do
  dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$out"
done
rm -rf "$out"/usr/share/doc "$out"/usr/share/man "$out"/usr/share/info "$out"/usr/share/locale
printf 'root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$out"/etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' > "$out"/etc/group
touch "$out"/etc/ld.so.conf
if [ -d "$out"/usr/share/ca-certificates ]; then
  mkdir -p "$out"/etc/ssl/certs
  find "$out"/usr/share/ca-certificates -name '*.crt' -print0 | sort -z |
    xargs -0 cat > "$out"/etc/ssl/certs/ca-certificates.crt
fi
ldconfig -r "$out"
