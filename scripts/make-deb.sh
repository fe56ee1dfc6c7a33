#!/usr/bin/env bash
# Builds stowfs_<version>_<arch>.deb from binaries already built (make deb builds them first).
#
#   scripts/make-deb.sh [--bin .build/release] [--out dist]
#
# One package with both programs: stowfs starts the stowd beside it when no endpoint is given, so
# they belong together (docs/packaging.md says why). The Swift runtime the binaries link is copied
# into /usr/lib/stowfs and the binaries' RUNPATH is set to it; everything is stripped. Needs
# dpkg-dev and patchelf (scripts/install-deps.sh deb). DEB_COMPRESSION=gzip: faster, larger (default xz).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.build/release
out=dist
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) bin="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "make-deb.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
for b in stowd stowfs; do
    [ -x "$bin/$b" ] || { echo "make-deb.sh: no $bin/$b (build it first: swift build -c release)" >&2; exit 1; }
done
for t in dpkg-deb dpkg-shlibdeps patchelf strip; do
    command -v "$t" >/dev/null || { echo "make-deb.sh: $t is missing (scripts/install-deps.sh deb)" >&2; exit 1; }
done

version="$("$bin/stowfs" --version)"
arch="$(dpkg --print-architecture)"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/DEBIAN"

# The programs and the Swift runtime they link: every library ldd finds that no Debian package
# owns (a toolchain in /opt/swift, or one unpacked under /usr/lib as Swift's images have it).
install -d "$root/usr/bin" "$root/usr/lib/stowfs"
for b in stowd stowfs; do
    install -m 0755 "$bin/$b" "$root/usr/bin/$b"
    ldd "$bin/$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    real="$(readlink -f "$lib")"
    dpkg -S "$lib" >/dev/null 2>&1 || dpkg -S "$real" >/dev/null 2>&1 && continue
    install -m 0644 "$lib" "$root/usr/lib/stowfs/"
done
for f in "$root"/usr/bin/* "$root"/usr/lib/stowfs/*; do
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$f"
done
for b in stowd stowfs; do patchelf --set-rpath /usr/lib/stowfs "$root/usr/bin/$b"; done
for l in "$root"/usr/lib/stowfs/*; do patchelf --set-rpath /usr/lib/stowfs "$l"; done

# mount(8) helpers: `mount -t stowfs` runs mount.stowfs, /etc/fstab's fuse.stowfs runs mount.fuse.stowfs.
install -d "$root/sbin"
for f in mount.fuse.stowfs umount.fuse.stowfs; do
    sed -e 's|@BINDIR@|/usr/bin|g' "mount-helpers/$f" > "$root/sbin/$f"
    chmod 0755 "$root/sbin/$f"
done
ln -s mount.fuse.stowfs "$root/sbin/mount.stowfs"

# systemd units, the user stowd.service runs as, settings.
install -d "$root/lib/systemd/system" "$root/usr/lib/sysusers.d" "$root/etc/stowfs" "$root/etc/default" "$root/etc/stowd"
for f in stowd.service stowfs@.service; do
    sed -e 's|@BINDIR@|/usr/bin|g' -e 's|@DOCDIR@|/usr/share/doc/stowfs|g' "mount-helpers/systemd/$f" > "$root/lib/systemd/system/$f"
    chmod 0644 "$root/lib/systemd/system/$f"
done
install -m 0644 mount-helpers/sysusers/stowd.conf "$root/usr/lib/sysusers.d/stowd.conf"
install -m 0644 packaging/config.toml "$root/etc/stowfs/config.toml"
install -m 0644 packaging/stowd.default "$root/etc/default/stowd"
# /etc/stowd: made 0750 root:stowd by postinst, once the user exists.

# Man pages, completions, documents.
python3 scripts/gen-man.py --bin "$bin" --out "$root/usr/share/man" >/dev/null
printf '.so man1/stowfs-mount.1\n' > "$root/usr/share/man/man8/mount.stowfs.8"
printf '.so man1/stowfs-unmount.1\n' > "$root/usr/share/man/man8/umount.fuse.stowfs.8"
find "$root/usr/share/man" -type f -exec gzip -9n {} +
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" "$root/usr/share/fish/vendor_completions.d"
for p in stowd stowfs; do
    # bash-completion sources the file: no #! line.
    "$bin/$p" --generate-completion-script bash | sed '1{/^#!/d}' > "$root/usr/share/bash-completion/completions/$p"
    "$bin/$p" --generate-completion-script zsh > "$root/usr/share/zsh/vendor-completions/_$p"
    "$bin/$p" --generate-completion-script fish > "$root/usr/share/fish/vendor_completions.d/$p.fish"
done
install -d "$root/usr/share/doc/stowfs" "$root/usr/share/lintian/overrides"
install -m 0644 README.md docs/SEMANTICS.md docs/deploy.md "$root/usr/share/doc/stowfs/"
install -m 0644 packaging/debian/copyright "$root/usr/share/doc/stowfs/copyright"
date_rfc="$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
sed -e "s|@VERSION@|$version|" -e "s|@COMMIT@|$commit|" -e "s|@DATE@|$date_rfc|" packaging/debian/changelog \
    | gzip -9n > "$root/usr/share/doc/stowfs/changelog.gz"
install -m 0644 packaging/debian/lintian-overrides "$root/usr/share/lintian/overrides/stowfs"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# Dependencies of the binaries and the bundled runtime on Debian's libraries (dpkg-shlibdeps wants
# a debian/control to read; the bundled libraries are ours, so missing information about them is fine).
mkdir -p "$work/src/debian"
printf 'Source: stowfs\n\nPackage: stowfs\nArchitecture: any\n' > "$work/src/debian/control"
shlibs="$(cd "$work/src" && dpkg-shlibdeps -O --ignore-missing-info -l"$root/usr/lib/stowfs" \
    "$root"/usr/bin/* "$root"/usr/lib/stowfs/* 2>/dev/null | sed -n 's/^shlibs:Depends=//p')"
depends="fuse3, ${shlibs}"

# Control files.
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
(cd "$root" && find etc -type f | sed 's|^|/|' | sort) > "$root/DEBIAN/conffiles"
size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" \
    packaging/debian/control.in > "$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | sort | xargs md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

mkdir -p "$out"
deb="$out/stowfs_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Z"${DEB_COMPRESSION:-xz}" --build "$root" "$deb" >/dev/null
echo "$deb ($(du -h "$deb" | cut -f1); depends: $depends)"
