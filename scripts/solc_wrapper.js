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
//   solc_wrapper.js [prefix=target ...] FILE.sol ... --combined-json abi,ast,bin,...
//                   [--optimize] [--optimize-runs N] [--evm-version V] [--via-ir]
//                   [--allow-paths A,B] [--base-path DIR]
//       what crytic-compile (Slither) calls: the files and remappings become a standard-JSON
//       compile, and its output is turned back into solc's legacy --combined-json format
//       ("contracts" keyed "unit:Name", "sources" with each unit's AST, "sourceList").
//       Source unit names are the paths as given, relative to the working directory.
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
  const opts = {
    version: false,
    standardJson: false,
    basePath: null,
    allowPaths: [],
    combinedJson: null,
    files: [],
    remappings: [],
    optimize: false,
    runs: 200,
    evmVersion: null,
    viaIR: false,
  };
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
    } else if (arg === "--combined-json") opts.combinedJson = value().split(",");
    else if (arg === "--optimize") opts.optimize = true;
    else if (arg === "--optimize-runs") opts.runs = Number(value());
    else if (arg === "--evm-version") opts.evmVersion = value();
    else if (arg === "--via-ir" || arg === "--experimental-via-ir") opts.viaIR = true;
    else if (!arg.startsWith("--") && arg.includes("=")) opts.remappings.push(arg);
    else if (!arg.startsWith("--")) opts.files.push(arg);
    else {
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

// -- legacy --combined-json (crytic-compile / Slither) ------------------------------------

function combinedJson(opts) {
  if (opts.files.length === 0) fail("--combined-json needs at least one source file");
  const cwd = process.cwd();
  const roots = [cwd, NODE_MODULES, ...opts.allowPaths];
  const sources = {};
  for (const file of opts.files) {
    const resolved = path.resolve(file);
    if (!fs.existsSync(resolved)) fail(`no such source file: ${file}`);
    sources[path.relative(cwd, resolved).split(path.sep).join("/")] = {
      content: fs.readFileSync(resolved, "utf8"),
    };
  }
  const settings = {
    remappings: opts.remappings,
    optimizer: { enabled: opts.optimize, runs: opts.runs },
    viaIR: opts.viaIR,
    outputSelection: {
      "*": {
        "*": [
          "abi",
          "devdoc",
          "userdoc",
          "evm.bytecode.object",
          "evm.bytecode.sourceMap",
          "evm.deployedBytecode.object",
          "evm.deployedBytecode.sourceMap",
          "evm.methodIdentifiers",
        ],
        "": ["ast"],
      },
    },
  };
  if (opts.evmVersion) settings.evmVersion = opts.evmVersion;
  const input = JSON.stringify({ language: "Solidity", sources, settings });
  // Units are paths relative to the working directory (remapped ones included); packages
  // ("@openzeppelin/...") without a remapping come from node_modules.
  const findImports = (unit) => {
    const candidates = unit.startsWith("@")
      ? [path.join(NODE_MODULES, unit), path.join(cwd, unit)]
      : [path.join(cwd, unit), path.join(NODE_MODULES, unit)];
    for (const file of candidates) {
      const resolved = path.resolve(file);
      if (!roots.some((root) => isInside(root, resolved))) continue;
      if (fs.existsSync(resolved) && fs.statSync(resolved).isFile()) {
        return { contents: fs.readFileSync(resolved, "utf8") };
      }
    }
    return { error: `file not found: ${unit}` };
  };
  const output = JSON.parse(solc.compile(input, { import: findImports }));
  let failed = false;
  for (const e of output.errors || []) {
    process.stderr.write(`${e.formattedMessage || e.message}\n`);
    if (e.severity === "error") failed = true;
  }
  if (failed) process.exit(1);
  const wanted = new Set(opts.combinedJson);
  const contracts = {};
  for (const [unit, byName] of Object.entries(output.contracts || {})) {
    for (const [name, c] of Object.entries(byName)) {
      const entry = {};
      if (wanted.has("abi")) entry.abi = c.abi;
      if (wanted.has("bin")) entry.bin = c.evm.bytecode.object;
      if (wanted.has("bin-runtime")) entry["bin-runtime"] = c.evm.deployedBytecode.object;
      if (wanted.has("srcmap")) entry.srcmap = c.evm.bytecode.sourceMap || "";
      if (wanted.has("srcmap-runtime")) {
        entry["srcmap-runtime"] = c.evm.deployedBytecode.sourceMap || "";
      }
      if (wanted.has("userdoc")) entry.userdoc = c.userdoc;
      if (wanted.has("devdoc")) entry.devdoc = c.devdoc;
      if (wanted.has("hashes")) entry.hashes = c.evm.methodIdentifiers;
      contracts[`${unit}:${name}`] = entry;
    }
  }
  const units = Object.entries(output.sources || {}).sort((a, b) => a[1].id - b[1].id);
  const result = {
    contracts,
    sourceList: units.map(([unit]) => unit),
    sources: Object.fromEntries(
      units.map(([unit, s]) => [unit, wanted.has("ast") ? { AST: s.ast, id: s.id } : { id: s.id }]),
    ),
    version: solc.version(),
  };
  process.stdout.write(JSON.stringify(result));
  process.stdout.write("\n");
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.combinedJson) {
    combinedJson(opts);
    return;
  }
  if (opts.version) {
    process.stdout.write(
      `solc, the solidity compiler commandline interface\nVersion: ${solc.version()}\n`,
    );
    return;
  }
  if (!opts.standardJson) fail("only --version, --standard-json and --combined-json are supported");

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
