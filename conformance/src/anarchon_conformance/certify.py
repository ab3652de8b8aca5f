"""`anarchon certify module:Harness`: run the whole kit against one harness and print, and
optionally write, the certificate. The `anarchon` CLI delegates here;
``python -m anarchon_conformance`` is the same command."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .certificate import Certificate
from .pytest_plugin import RESULTS_ENV, SUITE_ENV

__all__ = ["certify", "main", "run_certification"]

_MODULE = """\
import sys

sys.path.insert(0, {cwd!r})

from anarchon_conformance import ConformanceSuite
from {module} import {name} as _Harness


class Test{name}(ConformanceSuite):
    harness_class = _Harness
"""

_INI = """\
[pytest]
asyncio_default_fixture_loop_scope = function
"""


def certify(
    harness_path: str, url: str | None = None, *, pytest_args: Sequence[str] = ()
) -> tuple[int, list[Certificate]]:
    """Run `ConformanceSuite` with the harness ``module:Class``; returns pytest's exit code and
    the certificates (one, unless the run failed before any check)."""
    module, _, name = harness_path.partition(":")
    if not module or not name.isidentifier():
        raise SystemExit(f"harness must be given as module:Class, got {harness_path!r}")
    with tempfile.TemporaryDirectory(prefix="anarchon-certify-") as tmp:
        root = Path(tmp)
        test_file = root / f"test_certify_{name.lower()}.py"
        test_file.write_text(_MODULE.format(cwd=os.getcwd(), module=module, name=name))
        (root / "pytest.ini").write_text(_INI)
        out = root / "certificates"
        env = {**os.environ, RESULTS_ENV: str(out), SUITE_ENV: harness_path}
        args = [
            sys.executable,
            "-m",
            "pytest",
            str(test_file),
            "-c",
            str(root / "pytest.ini"),
            "--rootdir",
            str(root),
            "-p",
            "no:cacheprovider",
            "-q",
            *(["--anarchon-url", url] if url else []),
            *pytest_args,
        ]
        # A child process, so pytest can rewrite the kit's assertions (already imported here).
        code = subprocess.call(args, env=env)
        certificates = [
            Certificate.from_dict(json.loads(p.read_text())) for p in sorted(out.glob("*.json"))
        ]
    return code, certificates


def run_certification(
    harness_path: str,
    url: str | None,
    out: Path | None,
    *,
    pytest_args: Sequence[str] = (),
) -> int:
    """Certify, print the certificate, write it as Markdown and JSON into the directory `out`;
    return 0 only when the backend is certified (no rule failed, none required was skipped)."""
    code, certificates = certify(harness_path, url, pytest_args=pytest_args)
    if not certificates:
        sys.stderr.write(f"no certificate: the kit did not run (pytest exit code {code})\n")
        return code or 2
    if out is not None:
        from .pytest_plugin import write_certificate

        for certificate in certificates:
            stem = certificate.backend if len(certificates) == 1 else None
            for path in write_certificate(certificate, out, stem):
                sys.stdout.write(f"wrote {path}\n")
    return 0 if all(c.certified for c in certificates) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="anarchon certify",
        description="Run the conformance kit against a backend harness and print its certificate.",
    )
    parser.add_argument("harness", help="the BackendHarness class, as module:Class")
    parser.add_argument("--url", default=None, help="store URL passed to the harness")
    parser.add_argument(
        "--out", type=Path, default=None, help="directory to write the certificate (.md, .json)"
    )
    parser.epilog = "Arguments after -- go to pytest."
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1 :]
        argv = argv[: argv.index("--")]
    args = parser.parse_args(argv)
    return run_certification(args.harness, args.url, args.out, pytest_args=extra)
