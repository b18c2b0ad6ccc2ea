#!/bin/bash
# install_test.sh: the Node.js binding's install test, a user outside the
# checkout. `meson install --destdir` of the build into a private folder;
# `npm pack` of bindings/node; then, in a fresh project outside the
# checkout and under `env -i` (PATH, HOME and PKG_CONFIG_PATH only),
# `npm install <tarball> --offline`, which compiles the addon against the
# installed libclade found by pkg-config; and the README's example run on
# a random model written by the installed CLI, with PATH alone.
# usage: install_test.sh BUILD_DIR SOURCE_DIR MESON
set -uo pipefail
build=$1; src=$2; meson=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
path=/usr/bin:/bin
# A clean environment: no loader or compiler search paths from the caller.
unset LD_LIBRARY_PATH CPATH C_INCLUDE_PATH LIBRARY_PATH PKG_CONFIG_PATH CLADE_NODE_ADDON CLADE_LIB_DIR \
  CLADE_LIBRARY NODE_PATH NODE_OPTIONS

"$meson" install -C "$build" --no-rebuild --destdir "$dir/root" --quiet > "$dir/install.log" 2>&1 ||
  { cat "$dir/install.log"; fail "meson install"; }
pc=$(find "$dir/root" -name clade.pc -path '*/pkgconfig/*' | head -1)
[ -n "$pc" ] || fail "no clade.pc installed"
pcdir=$(dirname "$pc")
prefix=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=prefix clade)
libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir clade)
cli=$prefix/bin/clade
[ -x "$cli" ] || fail "no installed CLI at $cli"
"$cli" model random -o "$dir/m.gguf" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ff 128 --type f16 \
  --vocab-from "$src/tests/data/vocab/ggml-vocab-llama-spm.gguf" > /dev/null || fail "clade model random"

# The tarball, from the checkout (npm writes nothing there).
mkdir -p "$dir/home" "$dir/pack"
npmenv=(npm_config_cache="$dir/npm-cache" npm_config_update_notifier=false npm_config_audit=false
        npm_config_fund=false npm_config_offline=true)
(cd "$src/bindings/node" && env -i PATH=$path HOME="$dir/home" "${npmenv[@]}" \
  npm pack --offline --ignore-scripts --pack-destination "$dir/pack") > "$dir/pack.log" 2>&1 ||
  { cat "$dir/pack.log"; fail "npm pack"; }
tgz=$(ls "$dir"/pack/clade-*.tgz 2> /dev/null | head -1)
[ -n "$tgz" ] || { cat "$dir/pack.log"; fail "npm pack wrote no clade-*.tgz"; }
listing=$(tar tzf "$tgz")
for f in package/package.json package/index.d.ts package/lib/index.js package/src/addon.c \
         package/scripts/build.js package/README.md; do
  grep -qx "$f" <<< "$listing" || fail "$f is not in $(basename "$tgz")"
done
grep -q "^package/\(test\|build\)/" <<< "$listing" && fail "the tarball holds tests or build outputs: $listing"
echo "packed $(basename "$tgz"): $(wc -l <<< "$listing") files"

# A fresh project outside the checkout: npm install of the tarball, offline.
mkdir -p "$dir/app"
printf '{ "name": "app", "version": "1.0.0", "private": true }\n' > "$dir/app/package.json"
(cd "$dir/app" && env -i PATH=$path HOME="$dir/home" PKG_CONFIG_PATH="$pcdir" "${npmenv[@]}" \
  npm install "$tgz" --offline --no-audit --no-fund --foreground-scripts) \
  > "$dir/npm.log" 2>&1 || { cat "$dir/npm.log"; fail "npm install of the tarball"; }
addon=$dir/app/node_modules/clade/build/clade.node
[ -f "$addon" ] || { cat "$dir/npm.log"; fail "npm install built no addon"; }
lib=$(ldd "$addon" | sed -n 's/.*libclade\.so\.[0-9]* => \(.*\) (.*/\1/p')
[ "$(cd "$(dirname "$lib")" && pwd -P)" == "$(cd "$libdir" && pwd -P)" ] ||
  fail "the addon loads libclade from '$lib', not $libdir"

# The README's example (its first js block that requires clade), on the
# random model, with PATH alone.
awk '/^```js/ {on = 1; block = ""; next} on && /^```/ {if (block ~ /require\(.clade.\)/) {print block; exit} on = 0; next}
     on {block = block $0 "\n"}' "$src/bindings/node/README.md" | sed "s|'model.gguf'|'$dir/m.gguf'|" \
  > "$dir/app/example.js"
grep -q "require('clade')" "$dir/app/example.js" || fail "no example requiring clade in bindings/node/README.md"
out=$(cd "$dir/app" && env -i PATH=$path node example.js 2>&1) || fail "the README's example: $out"
echo "$out"
n=$(grep -cE "^(stop_token|stop_string|length): " <<< "$out")
[ "$n" -eq 4 ] || fail "the README's example: expected 4 results, got $n"
echo "ok: npm install --offline of $(basename "$tgz") against the installed libclade; the README example ran"
