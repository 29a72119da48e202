"""Cluster options from the command line and sweep files: TLS files, the tuner's host and port."""

from __future__ import annotations

import os

import pytest

from tuneplat.cli import _common, _main
from tuneplat.config import SweepFileError, load_sweep

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "toy_asha.yaml")


def _args(*argv: str):
    return _main._parser().parse_args(["run", EXAMPLE, *argv])


def test_cli_tls_and_tuner_port_reach_run_config():
    args = _args("--address", "tls://10.0.0.5:8786", "--tls-ca-file", "ca.pem", "--tls-cert", "c.pem",
                 "--tls-key", "k.pem", "--tuner-port", "8790-8799", "--tuner-host", "10.0.0.9")
    sweep = load_sweep(EXAMPLE, _common._cli_overrides(args))
    rc = sweep.run_config
    assert rc.address == "tls://10.0.0.5:8786"
    assert rc.security == {"tls_ca_file": "ca.pem", "tls_client_cert": "c.pem", "tls_client_key": "k.pem",
                           "require_encryption": True}
    assert rc.tuner_port == "8790-8799" and rc.tuner_host == "10.0.0.9"
    assert load_sweep(EXAMPLE, _common._cli_overrides(_args("--tuner-port", "8790"))).run_config.tuner_port == 8790


def test_sweep_tls_needs_all_three_files():
    with pytest.raises(SweepFileError, match=r"run\.tls.*missing \['key'\]"):
        load_sweep(EXAMPLE, ["run.tls.ca_file=\"ca.pem\"", "run.tls.cert=\"c.pem\""])
    with pytest.raises(SweepFileError, match=r"run\.tuner_port"):
        load_sweep(EXAMPLE, ["run.tuner_port=\"eighty\""])
