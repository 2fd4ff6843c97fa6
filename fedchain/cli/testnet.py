"""``fedchain testnet``: a local testnet of real processes."""

from __future__ import annotations

import argparse
import json

from fedchain.options.checks import demo_config as _demo_config
from protocol.errors import ConfigError


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fedchain.testnet import cluster as testnet

    directory = Path(args.dir)
    if args.action == "up":
        cfg = _demo_config(args)
        scenario = None
        if args.scenario:
            from dataclasses import replace

            from fedchain.sim.scenario import load_scenario

            scenario = load_scenario(args.scenario)
            cfg = replace(scenario.config, out=cfg.out)
        from fedchain.testnet.netem import profile_from_args

        wan = profile_from_args(
            args.pbft_latency, args.pbft_jitter, args.pbft_loss, args.pbft_loss_mode, "--pbft-"
        )
        spec = testnet.up(
            cfg,
            directory,
            use_ipfs=not args.no_ipfs,
            block_time=args.block_time,
            scenario=scenario,
            pbft_netem=wan if wan.active else None,
        )
        print(
            f"testnet up in {directory}: task {spec['task']} on {spec['rpc_url']}, "
            f"store {spec.get('ipfs_api') or spec.get('store_dir')}, "
            f"{len(spec['nodes'])} node processes (logs in {directory / 'logs'})"
        )
        if args.wait:
            st = testnet.wait(directory, timeout=args.timeout)
            print(json.dumps(st["chain"], indent=2))
        return 0
    if args.action == "status":
        st = testnet.status(directory)
        if args.json:
            print(json.dumps(st, indent=2))
        else:
            chain = st.get("chain")
            if chain:
                print(
                    f"task {st['task']}  block {chain['block']}  round {chain['round']}/"
                    f"{chain['rounds']}  phase {chain['phase']}  completed {chain['completed']}"
                )
            for name, svc in {**st["services"], **st["nodes"]}.items():
                state = "running" if svc["running"] else "stopped"
                print(f"  {name:16s} pid {svc['pid']!s:8s} {state}")
        return 0
    if args.action == "wait":
        st = testnet.wait(directory, timeout=args.timeout)
        print(json.dumps(st["chain"], indent=2))
        return 0
    if args.action == "restart-chain":
        spec = testnet.restart_chain(directory)
        print(f"anvil restarted from its saved state on {spec['rpc_url']}")
        return 0
    if args.action == "down":
        stopped = testnet.down(directory)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    if not args.node:
        raise ConfigError(f"testnet {args.action} needs a node name (e.g. aggregator-1)")
    if args.action == "kill":
        ran = testnet.kill_node(directory, args.node)
        print(f"{args.node}: {'killed (SIGKILL)' if ran else 'was not running'}")
        return 0
    pid = testnet.start_node(directory, args.node)
    print(f"{args.node}: started (pid {pid})")
    return 0
