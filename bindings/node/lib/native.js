// lib/native.js: loads clade's Node-API addon (the one-to-one layer over
// the C API). CLADE_NODE_ADDON names the file to load (the tests point it at
// the Meson build's); otherwise build/clade.node of this package, which
// `npm install` compiles (scripts/build.js).
'use strict';

const path = require('path');

function load() {
  const file = process.env.CLADE_NODE_ADDON
    ? path.resolve(process.env.CLADE_NODE_ADDON)
    : path.join(__dirname, '..', 'build', 'clade.node');
  try {
    return require(file);
  } catch (e) {
    const err = new Error(
      `clade: cannot load the addon ${file}: ${e.message}\n` +
        '(build it with `npm install` / `node scripts/build.js`, which needs libclade ' +
        'through pkg-config, or set CLADE_NODE_ADDON to a built clade.node)');
    err.code = 'CLADE_ADDON_MISSING';
    err.cause = e;
    throw err;
  }
}

module.exports = load();
