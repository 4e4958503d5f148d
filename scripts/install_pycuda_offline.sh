#!/usr/bin/env bash
# Install pycuda and its pure-Python needs from a folder of downloaded files, with no network
# (an air-gapped GPU machine). Uses a prebuilt pycuda wheel from the folder when there is one;
# otherwise builds the sdist there (about 80 s on 16 cores) and leaves the wheel in FOLDER/built/.
# Usage: source scripts/install_pycuda_offline.sh FOLDER [SITE]   (then PYTHONPATH has SITE and .)
folder=$(cd "${1:-.whl}" && pwd) || return 1
site=${2:-/tmp/site}
python3 -m pip install -q --no-index --no-deps --target "$site" "$folder"/*.whl || return 1
if [ ! -d "$site/pycuda" ]; then
  build=$(mktemp -d)
  tar xzf "$folder"/pycuda-*.tar.gz -C "$build"
  (cd "$build"/pycuda-*/ && python3 configure.py --cuda-root="${CUDA_HOME:-/usr/local/cuda}" >/dev/null &&
    python3 -m pip wheel -q --no-index --no-deps --no-build-isolation -w "$folder/built" .) || return 1
  python3 -m pip install -q --no-index --no-deps --target "$site" "$folder"/built/pycuda-*.whl || return 1
fi
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
