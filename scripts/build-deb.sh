#!/usr/bin/env bash
# Builds flotilla's Debian package from a flotilla binary and packaging/debian/, with
# Debian's own dpkg-deb, and prints the package's path.
#
#   scripts/build-deb.sh [BINARY] [OUTDIR]
#
# BINARY defaults to target/release/flotilla (`cargo build --release --locked -p flotilla
# --features full`), OUTDIR to target/debian. The package holds /usr/bin/flotilla, the
# systemd unit `flotilla install` writes for /etc/flotilla/config.toml (made by the binary
# itself, so the two never differ), the example configuration (a conffile), bash completion,
# the man pages and the README.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
binary="${1:-$repo/target/release/flotilla}"
out="${2:-$repo/target/debian}"
[ -x "$binary" ] || { echo "no flotilla binary at $binary" >&2; exit 1; }
version="$("$binary" --version | awk '{print $2}')"
arch="$(dpkg --print-architecture)"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
install -D -m 0755 "$binary" "$root/usr/bin/flotilla"
# As dh_strip does: no symbols (a panic's backtrace then names no functions).
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$root/usr/bin/flotilla"
install -D -m 0644 "$repo/packaging/debian/config.toml" "$root/etc/flotilla/config.toml"
"$binary" install --root "$root" --config /etc/flotilla/config.toml \
  --binary /usr/bin/flotilla --unit-dir /lib/systemd/system 2>/dev/null
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/man/man1" \
  "$root/usr/share/doc/flotilla"
"$binary" completion bash >"$root/usr/share/bash-completion/completions/flotilla"
"$binary" man --dir "$stage/man"
for page in "$stage"/man/*.1; do
  gzip -9n <"$page" >"$root/usr/share/man/man1/$(basename "$page").gz"
done
gzip -9n <"$repo/README.md" >"$root/usr/share/doc/flotilla/README.md.gz"
commit="$("$binary" --version | sed -n 's/.*commit \([0-9a-f]*\).*/\1/p')"
printf 'flotilla (%s) unstable; urgency=medium\n\n  * Built from commit %s.\n\n -- flotilla developers <flotilla@example.invalid>  %s\n' \
  "$version" "${commit:-unknown}" "$(date -R)" | gzip -9n >"$root/usr/share/doc/flotilla/changelog.gz"
cat >"$root/usr/share/doc/flotilla/copyright" <<'COPYRIGHT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: flotilla

Files: *
Copyright: 2026 the flotilla developers
License: MIT or Apache-2.0
 flotilla is licensed under the MIT license or the Apache License 2.0, at
 your option. On Debian systems the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0; the MIT license's text is in the
 source repository.
COPYRIGHT
install -D -m 0644 "$repo/packaging/debian/lintian-overrides" \
  "$root/usr/share/lintian/overrides/flotilla"

install -d "$root/DEBIAN"
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" "$repo/packaging/debian/control.in" \
  >"$root/DEBIAN/control"
echo "/etc/flotilla/config.toml" >"$root/DEBIAN/conffiles"
for script in postinst prerm postrm; do
  install -m 0755 "$repo/packaging/debian/$script" "$root/DEBIAN/$script"
done
mkdir -p "$out"
deb="$out/flotilla_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$root" "$deb" >/dev/null
echo "$deb"
