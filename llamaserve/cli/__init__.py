"""The ``llamaserve`` command: serve, ``check`` a config, ``init-config`` a starter one, ``demo``,
``deploy`` or ``rpc-worker``. One module per concept: flags, serve_config, describe, starter, commands."""

from __future__ import annotations

import sys

from llamaserve.cli.commands import deploy_files, rpc_worker
from llamaserve.cli.describe import describe
from llamaserve.cli.flags import UsageError, build_parser, unknown_flag
from llamaserve.cli.serve_config import DEMO_MODEL, config_from_args, demo_config
from llamaserve.cli.starter import starter_config, write_starter_config
from llamaserve.cli.templates import check_templates
from llamaserve.config.parse import ConfigError, load_config

__all__ = ["DEMO_MODEL", "UsageError", "build_parser", "config_from_args", "demo_config", "describe", "main",
           "starter_config", "write_starter_config"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for configuration and usage errors)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    problem = unknown_flag(parser, argv)
    if problem:
        parser.error(problem)
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            config = load_config(args.file)
            check_templates(config)
            print(describe(config))
            return 0
        if args.command == "rpc-worker":
            return rpc_worker(args)
        if args.command == "deploy":
            return deploy_files(args)
        if args.command == "init-config":
            path = write_starter_config(args.directory, args.output, args.force)
            print(f"wrote {path}; check it with: llamaserve check {path}")
            return 0
        config = demo_config(args) if args.command == "demo" else config_from_args(args)
        check_templates(config)
    except (ConfigError, UsageError) as e:
        print(f"llamaserve: {e}" if isinstance(e, UsageError) else e, file=sys.stderr)
        return 2
    if args.print_config:
        print(describe(config))
        return 0
    from llamaserve.app import serve  # the server stack is only needed to serve

    serve(config)
    return 0
