#!/usr/bin/env node
// A `solc` stand-in for py-solc-x, backed by solc-js from node_modules.
//
// py-solc-x cannot download native solc here, so adapters.compile points
// `solcx.compile_standard(..., solc_binary=<this file>)` at this script. It implements the
// two entry points solcx uses:
//
//   solc_wrapper.js --version
//       prints "solc, the solidity compiler commandline interface\nVersion: <solc.version()>"
//   solc_wrapper.js --standard-json [--base-path DIR] [--allow-paths A,B,...]  < input.json
//       compiles the standard-JSON input read from stdin and prints ONLY the standard-JSON
//       output on stdout (solc-js's own CLI prints a non-JSON SMT warning line first).
//
// Imports are resolved by a callback: "@openzeppelin/..." (and any other package path) from
// <repo>/node_modules, everything else relative to the contracts directory (--base-path, or
// <repo>/contracts by default). Paths escaping the allowed roots are refused.
"use strict";

const fs = require("fs");
const path = require("path");

const REPO_ROOT = path.resolve(__dirname, "..");
const NODE_MODULES = path.join(REPO_ROOT, "node_modules");

function fail(message) {
  process.stderr.write(`solc_wrapper: ${message}\n`);
  process.exit(2);
}

let solc;
try {
  solc = require(path.join(NODE_MODULES, "solc"));
} catch (err) {
  fail(`cannot load solc-js from ${NODE_MODULES} (${err.message}); run \`make setup\` (npm ci)`);
}

function parseArgs(argv) {
  const opts = { version: false, standardJson: false, basePath: null, allowPaths: [] };
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) fail(`option ${arg} needs a value`);
      i += 1;
      return argv[i];
    };
    if (arg === "--version") opts.version = true;
    else if (arg === "--standard-json") opts.standardJson = true;
    else if (arg === "--base-path") opts.basePath = path.resolve(value());
    else if (arg === "--allow-paths") {
      opts.allowPaths.push(...value().split(",").filter(Boolean).map((p) => path.resolve(p)));
    } else if (arg === "-") {
      // "read from stdin": implied by --standard-json
    } else {
      fail(`unrecognised option '${arg}'`);
    }
  }
  return opts;
}

function isInside(root, candidate) {
  const rel = path.relative(root, candidate);
  return rel === "" || (!rel.startsWith("..") && !path.isAbsolute(rel));
}

function makeImportCallback(contractsRoot, extraRoots) {
  const roots = [contractsRoot, NODE_MODULES, ...extraRoots];
  return function findImports(unitName) {
    if (path.isAbsolute(unitName)) {
      return { error: `absolute import paths are not allowed: ${unitName}` };
    }
    // Package imports ("@openzeppelin/...") come from node_modules; everything else from
    // the contracts directory (node_modules as a fallback for other packages).
    const candidates = unitName.startsWith("@")
      ? [path.join(NODE_MODULES, unitName)]
      : [path.join(contractsRoot, unitName), path.join(NODE_MODULES, unitName)];
    for (const file of candidates) {
      const resolved = path.resolve(file);
      if (!roots.some((root) => isInside(root, resolved))) continue;
      if (fs.existsSync(resolved) && fs.statSync(resolved).isFile()) {
        return { contents: fs.readFileSync(resolved, "utf8") };
      }
    }
    return { error: `file not found: ${unitName} (looked in ${contractsRoot} and ${NODE_MODULES})` };
  };
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.version) {
    process.stdout.write(
      `solc, the solidity compiler commandline interface\nVersion: ${solc.version()}\n`,
    );
    return;
  }
  if (!opts.standardJson) fail("only --version and --standard-json are supported");

  const contractsRoot = opts.basePath || path.join(REPO_ROOT, "contracts");
  const input = fs.readFileSync(0, "utf8");
  try {
    JSON.parse(input);
  } catch (err) {
    fail(`stdin is not valid JSON: ${err.message}`);
  }
  const output = solc.compile(input, {
    import: makeImportCallback(contractsRoot, opts.allowPaths),
  });
  process.stdout.write(output);
  process.stdout.write("\n");
}

main();
