"""Command line of skbayes_sg: ``python -m skbayes_sg COMMAND [options]``.

Each subcommand lives in its own module, which provides two functions:

- ``add_arguments(parser)``: add the command's options to its argparse
  sub-parser;
- ``run(args) -> int``: do the work and return the exit status.

Adding a command is one entry in :data:`COMMANDS`.
"""
import argparse
import importlib
import sys

from . import __version__

# name -> (module implementing it, one-line help)
COMMANDS = {
    "demo": ("skbayes_sg._demo",
             "fit the estimators on datasets bundled with scikit-learn and print "
             "held-out metrics, posterior summaries and costs"),
    "fit": ("skbayes_sg._cli_fit",
            "fit an estimator on a CSV or libsvm file; print the posterior summary, "
            "convergence check and held-out metrics; save the draws (.npz, or .nc: "
            "ArviZ netCDF)"),
}


def build_parser():
    """The argparse parser of ``python -m skbayes_sg``, one sub-parser per command."""
    parser = argparse.ArgumentParser(
        prog="python -m skbayes_sg",
        description="Scikit-learn compatible Bayesian estimators sampled by "
                    "stochastic-gradient MCMC.")
    parser.add_argument("--version", action="version", version=f"skbayes_sg {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (module_name, help_text) in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(command_module=module_name)
        _command_module(module_name).add_arguments(sub)
    return parser


def _command_module(module_name):
    return importlib.import_module(module_name)


def main(argv=None):
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the command, return its status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(_command_module(args.command_module).run(args) or 0)
    except KeyboardInterrupt as exc:
        # Ctrl-C: what the interrupted fit left (its note), not a traceback
        # through the sampler; 130 = 128 + SIGINT, as a shell reports it
        notes = getattr(exc, "__notes__", None) or [str(a) for a in exc.args]
        print("\n".join(["interrupted"] + notes), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
