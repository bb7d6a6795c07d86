#!/usr/bin/env bash
# Runs `tools/gpu_check.sh run` HERE as the GPU machine would see it: no OpenMPI, PMIx or hwloc
# plugins installed, and a bare environment. Needs root (a private mount namespace, unshare -m).
#
#   tools/gpu_check_simulate.sh   # after tools/gpu_check.sh bundle; logs in $OUT or
#                                 # ./gpu_check_out, the run's table printed, then the check
#
# Inside the namespace, Debian's OpenMPI/PMIx directories (plugins, help files, /etc/openmpi) are
# empty, the system mpirun/orterun/orted/ompi_info are stubs that fail loudly, and the system's
# copies of every MPI library the bundle carries (libmpi, libopen-rte/-pal, libpmix, libhwloc,
# libevent, ...) are empty files, so any use of them fails instead of passing unnoticed. The run
# is traced with LD_DEBUG=libs; afterwards every object that a bundle binary (test, mpirun, rank)
# loaded is listed by origin, and the check fails if any came from outside the bundle other than
# glibc's and CUDA's, and if any log names the system installation or a missing help file.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ -f "$root/gpu_bundle/bundle.tar.xz" ]] || { echo "run tools/gpu_check.sh bundle first" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "gpu_check_simulate: needs root (unshare -m)" >&2; exit 1; }

ld="$(mktemp -d /tmp/gpu_check_ld.XXXXXX)"
trap 'rm -rf "$ld"' EXIT
out="${OUT:-$root/gpu_check_out}"

# The MPI libraries the bundle carries: their system copies get hidden.
mpi_libs=$(tar -tJf "$root/gpu_bundle/bundle.tar.xz" | sed -n 's|^\./lib/||p' |
  grep -E '^lib(mpi|open-|pmix|mca_common|hwloc|event|munge|ompitrace|oshmem)')

unshare -m --propagation private bash -s "$root" "$out" "$ld" "$mpi_libs" <<'EOF'
set -uo pipefail
root="$1" out="$2" ld="$3" mpi_libs="$4"
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi \
         /etc/openmpi /usr/lib/x86_64-linux-gnu/hwloc; do
  [[ -d "$d" ]] && mount -t tmpfs none "$d"
done
printf '#!/bin/sh\necho "system $0 used" >&2\nexit 99\n' > "$ld/stub"
chmod +x "$ld/stub"
: > "$ld/empty"
for b in orterun orted ompi_info mpirun mpiexec; do
  [[ -e "/usr/bin/$b" ]] && mount --bind "$ld/stub" "$(readlink -f "/usr/bin/$b")"
done
hidden=0
for name in $mpi_libs; do
  for dir in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu; do
    if [[ -e "$dir/$name" ]]; then
      mount --bind "$ld/empty" "$(readlink -f "$dir/$name")" && hidden=$((hidden + 1))
      break
    elif [[ -L "$dir/$name" ]]; then  # into a directory hidden above (libpmix: pmix2/)
      hidden=$((hidden + 1))
      break
    fi
  done
done
echo "gpu_check_simulate: hid Debian's OpenMPI, PMIx and hwloc plugin directories," \
  "the system mpirun/orted/ompi_info and $hidden of the $(echo $mpi_libs | wc -w) MPI libraries the bundle carries"
cd "$root"
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$HOME" \
  OUT="$out" LD_DEBUG=libs LD_DEBUG_OUTPUT="$ld/trace" tools/gpu_check.sh run
EOF
rc=$?
echo "gpu_check_simulate: gpu_check.sh run exited $rc"

# Objects loaded by processes whose program is in the unpacked bundle (/tmp/gpu_check.*/b/) or
# is an OpenMPI program found on PATH.
python3 - "$ld" <<'EOF'
import collections, glob, re, sys
bundle = re.compile(r"^/tmp/gpu_check\.[^/]+/b/")
allowed = re.compile(r"/(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux-x86-64)"
                     r"\.so|/libcuda\.so|/libcublas|/libnccl|/libcudart|/libnvidia")
by_origin = collections.Counter()
outside = set()
programs = collections.Counter()
for path in glob.glob(sys.argv[1] + "/trace.*"):
    text = open(path, errors="replace").read()
    m = re.search(r"(?:initialize program|transferring control): (\S+)", text)
    if not m:
        continue
    prog = m.group(1)
    if bundle.match(prog):
        prog = prog.split("/b/", 1)[1]
    elif prog in ("mpirun", "orterun", "orted", "ompi_info"):  # found on PATH
        prog += " (on PATH)"
    else:
        continue
    programs[prog] += 1
    for obj in set(re.findall(r"calling init: (\S+)", text)):
        if bundle.match(obj):
            by_origin["bundle " + obj.split("/b/", 1)[1].split("/")[0] + "/"] += 1
            if "/openmpi3/" in obj:
                by_origin["  of which MCA plugins"] += 1
            if "/pmix/lib/pmix/" in obj:
                by_origin["  of which PMIx plugins"] += 1
        elif allowed.search(obj):
            by_origin["system (glibc, CUDA)"] += 1
        else:
            outside.add(obj)
print("processes traced (program: count):")
for p, n in sorted(programs.items()):
    print("  %-40s %d" % (p, n))
print("objects initialised, by origin (summed over processes):")
for o, n in sorted(by_origin.items()):
    print("  %-40s %d" % (o, n))
if outside:
    print("FAIL: loaded from outside the bundle:")
    for o in sorted(outside):
        print("  " + o)
    sys.exit(1)
if not programs:
    print("FAIL: no bundle process traced")
    sys.exit(1)
print("OK: every library and plugin came from the bundle (besides glibc/CUDA)")
EOF
check=$?

# Nothing in the logs may mention the system installation, a missing help file or a stub.
if grep -E -n "Sorry!|open the help file|/usr/lib/x86_64-linux-gnu/(openmpi|pmix2)|/usr/share/openmpi|/etc/openmpi|system .* used|help files: NOT" \
    "$out"/*.log; then
  echo "FAIL: the logs above name the system OpenMPI/PMIx or a missing help file"
  check=1
else
  echo "OK: no log names the system OpenMPI/PMIx or a missing help file"
fi
exit $(( rc != 0 ? rc : check ))
