# shellcheck shell=bash
# What scripts/gpu_check.sh, gpu_ab.sh and gpu_profile.sh share, sourced by
# them from the repository root.

# gpu_build PREBUILT: with 1, build-gpu/ holds a scripts/gpu_bundle.sh
# bundle (for a GPU machine that cannot build clade) and its syslib/ goes
# on LD_LIBRARY_PATH; else build-gpu/ is built here with the CUDA backend.
gpu_build() {
  if [ "$1" == 1 ]; then
    export LD_LIBRARY_PATH=$PWD/build-gpu/syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  else
    [ -d build-gpu ] || meson setup build-gpu -Dcuda=enabled -Dbindings=disabled > /dev/null
    ninja -C build-gpu > /dev/null
  fi
}

# gpu_models CLADE: sets m4 and m16 to the GPU benchmarks' random models
# (8 layers, dim 1024, 16 heads, F16; 4 KV heads and 16) in $CLADE_MODELS
# (default /tmp/clade-bench-models), writing with the CLI CLADE those that
# are missing.
gpu_models() {
  local models=${CLADE_MODELS:-/tmp/clade-bench-models}
  mkdir -p "$models"
  m4=$models/l8-d1024-h16-kv4-f16.gguf
  m16=$models/l8-d1024-h16-kv16-f16.gguf
  [ -f "$m4" ] || "$1" model random -o "$m4" --layers 8 --dim 1024 --heads 16 --kv-heads 4 --ff 2816 --vocab 32000 --type f16
  [ -f "$m16" ] || "$1" model random -o "$m16" --layers 8 --dim 1024 --heads 16 --kv-heads 16 --ff 2816 --vocab 32000 --type f16
}

# gpu_sample_ab CLADE MODEL BACKEND PREFIX SAMPLES N ROUNDS: top-k sampling
# (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05: the library's
# defaults) of SAMPLES sequences under one PREFIX-token prompt, N tokens
# each, with the steps' top-k candidates read back (the default) and the
# whole rows (CLADE_SAMPLE_WHOLE_ROWS=1), alternating, ROUNDS rounds; each
# run's "tokens generated" line, and any line that says it failed.
gpu_sample_ab() {
  local clade=$1 model=$2 backend=$3 prefix=$4 samples=$5 n=$6 rounds=$7 toks round whole
  toks=$(seq -s ' ' 1 "$prefix")
  for round in $(seq 1 "$rounds"); do
    for whole in 0 1; do
      echo "## round $round, CLADE_SAMPLE_WHOLE_ROWS=$whole"
      CLADE_SAMPLE_WHOLE_ROWS=$whole "$clade" generate -m "$model" --backend "$backend" --past-context \
        --tokens "$toks" --samples "$samples" -n "$n" --temp 0.8 --ignore-eos 2>&1 > /dev/null |
        tr '\r' '\n' | grep -iE "tokens generated|error|fail"
    done
  done
}

# gpu_quant_ab CLADE BACKEND ROUNDS [MODEL ARGS...]: decode steps without
# attention at batch 1 and 16 (prefix 512, greedy tokens) of Q4_0 and Q8_0
# random models (m4's shape unless MODEL ARGS for `clade model random`,
# written to $CLADE_MODELS), their weights kept quantized and widened a
# tile at each product (the default) against widened to F16 at load
# (CLADE_CUDA_WIDEN_QUANT=1), alternating, ROUNDS rounds: issue 25 asks for
# both measured.
gpu_quant_ab() {
  local clade=$1 backend=$2 rounds=$3 models=${CLADE_MODELS:-/tmp/clade-bench-models} type model round widen
  shift 3
  local shape=("$@")
  [ ${#shape[@]} -gt 0 ] || shape=(--layers 8 --dim 1024 --heads 16 --kv-heads 4 --ff 2816 --vocab 32000)
  mkdir -p "$models"
  for type in q4_0 q8_0; do
    model=$models/quant-ab-$type-$(echo "${shape[*]}" | tr -dc '0-9a-z').gguf
    [ -f "$model" ] || "$clade" model random -o "$model" "${shape[@]}" --type $type > /dev/null || return 1
    for round in $(seq 1 "$rounds"); do
      for widen in 0 1; do
        echo "## $type, round $round, CLADE_CUDA_WIDEN_QUANT=$widen"
        CLADE_CUDA_VERBOSE=1 CLADE_CUDA_WIDEN_QUANT=$widen "$clade" bench decode -m "$model" --backend "$backend" --past-context \
          --batch 1,16 --prefix 512 --mode noattn --gen 32 --rounds 1 --logits greedy --csv 2>&1
      done
    done
  done
}
