#!/usr/bin/env bash
# Builds libktrace.so (ktrace.c) on the GPU machine against the CUPTI it
# finds (the CUDA toolkit's extras/CUPTI, else the nvidia-cuda-cupti Python
# package), with the newest kernel/memcpy/memset record versions its header
# declares. Usage: bash scripts/ktrace/build.sh OUTDIR; prints the library's path.
set -euo pipefail
outdir=${1:?usage: build.sh OUTDIR}
mkdir -p "$outdir"
inc=
for d in ${CUPTI_DIR:-} /usr/local/cuda/extras/CUPTI /usr/local/cuda/targets/x86_64-linux \
	$(python3 -c 'import nvidia, os; [print(os.path.join(p, s)) for p in nvidia.__path__ for s in sorted(os.listdir(p)) if "cupti" in s or s.startswith("cu1")]' 2>/dev/null); do
	[[ -n $d && -f $d/include/cupti.h ]] && { inc=$d/include; break; }
	[[ -n $d && -f $d/cuda_cupti/include/cupti.h ]] && { inc=$d/cuda_cupti/include; break; }
done
[[ -n $inc ]] || { echo "ktrace: no cupti.h found; set CUPTI_DIR" >&2; exit 1; }
lib=$(dirname "$inc")
libdir=$(dirname "$(find "$lib" /usr/local/cuda/ -name 'libcupti.so*' 2>/dev/null | head -1)")
newest() { grep -o "} $1[0-9]*;" "$inc/cupti_activity.h" | tr -dc '0-9\n' | sort -n | tail -1; }
kn=$(newest CUpti_ActivityKernel); mn=$(newest CUpti_ActivityMemcpy); sn=$(newest CUpti_ActivityMemset)
gcc -O2 -shared -fPIC -o "$outdir/libktrace.so" "$(dirname "$0")/ktrace.c" -I"$inc" -I/usr/local/cuda/include \
	-DKREC=CUpti_ActivityKernel$kn -DMREC=CUpti_ActivityMemcpy$mn -DSREC=CUpti_ActivityMemset$sn \
	-L"$libdir" -Wl,-rpath,"$libdir" -l:"$(basename "$(ls "$libdir"/libcupti.so* | head -1)")" -lpthread
echo "$outdir/libktrace.so"
