// scripts/build.js: `npm install`'s build of the addon, offline: compiles
// src/*.c into build/clade.node with the C compiler ($CC, else cc) against
// the Node-API headers of the node running it and the libclade that
// pkg-config finds (`pkg-config clade`; PKG_CONFIG_PATH for a private
// prefix), recording libclade's folder as the addon's rpath. No download,
// no node-gyp. CLADE_NODE_ADDON set: nothing to build (a prebuilt addon).
'use strict';

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const root = path.resolve(__dirname, '..');

function fail(msg) {
  process.stderr.write(`clade: ${msg}\n`);
  process.exit(1);
}

function pkgConfig(args) {
  const bin = process.env.PKG_CONFIG || 'pkg-config';
  try {
    return execFileSync(bin, [...args, 'clade'], { encoding: 'utf8' }).trim();
  } catch (e) {
    fail(`\`${bin} ${args.join(' ')} clade\` failed: libclade is not installed where pkg-config ` +
      'looks (install clade, or set PKG_CONFIG_PATH to the folder of its clade.pc)');
    return '';
  }
}

function nodeIncludeDir() {
  const candidates = [
    process.env.NODE_API_INCLUDE_DIR,
    process.config && process.config.variables && process.config.variables.node_prefix &&
      path.join(process.config.variables.node_prefix, 'include', 'node'),
    path.join(path.dirname(process.execPath), '..', 'include', 'node'),
    '/usr/include/node',
    '/usr/local/include/node',
  ].filter(Boolean);
  const dir = candidates.find((d) => fs.existsSync(path.join(d, 'node_api.h')));
  if (!dir) {
    fail(`node_api.h not found (looked in ${candidates.join(', ')}); install Node's headers ` +
      '(Debian: nodejs or libnode-dev) or set NODE_API_INCLUDE_DIR');
  }
  return dir;
}

function main() {
  if (process.env.CLADE_NODE_ADDON) return;
  const cflags = pkgConfig(['--cflags']).split(/\s+/).filter(Boolean);
  const libs = pkgConfig(['--libs']).split(/\s+/).filter(Boolean);
  const libdir = pkgConfig(['--variable=libdir']);
  const inc = nodeIncludeDir();
  const srcDir = path.join(root, 'src');
  const sources = fs.readdirSync(srcDir).filter((f) => f.endsWith('.c')).sort()
    .map((f) => path.join(srcDir, f));
  const outDir = path.join(root, 'build');
  fs.mkdirSync(outDir, { recursive: true });
  const out = path.join(outDir, 'clade.node');
  const cc = (process.env.CC || 'cc').split(/\s+/).filter(Boolean);
  const args = [...cc.slice(1), '-std=gnu11', '-O2', '-fPIC', '-shared', '-pthread', '-fvisibility=hidden',
    '-Wall', '-isystem', inc, ...cflags, ...sources, '-o', out, ...libs];
  if (libdir) args.push(`-Wl,-rpath,${libdir}`);
  process.stdout.write(`clade: ${cc[0]} ${args.join(' ')}\n`);
  try {
    execFileSync(cc[0], args, { stdio: 'inherit' });
  } catch (e) {
    fail(`compiling the addon failed (${e.message})`);
  }
}

main();
