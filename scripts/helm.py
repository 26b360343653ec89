#!/usr/bin/env python3
"""The Helm v4 engine for the chart's tests and `make chart`, with no helm binary.

PyPI's helm-python-sdk binds Helm's own Go SDK (lint, render, install, upgrade, rollback,
uninstall, package, OCI push and pull); `make helm-sdk` installs it into target/helm-sdk/
(or HELM_SDK_DIR). One subcommand per Helm command the tests use, each printing JSON on
stdout (text for `lint`); a Helm error goes to stderr, exit 1, with Helm's own words.

    helm.py version
    helm.py lint CHART [-f VALUES]...                       # strict: a warning fails
    helm.py render CHART [-n NS] [--name NAME] [-f VALUES]... [--set-json JSON]...
    helm.py schema CHART [-f VALUES]... [--set-json JSON]... # values.schema.json only
    helm.py package CHART DEST_DIR
    helm.py install|upgrade CHART_OR_OCI RELEASE -n NS [-f VALUES]... [--set-json JSON]...
                    [--wait SECONDS] [--version V] [--plain-http] [--take-ownership] [--force-conflicts]
    helm.py rollback RELEASE -n NS [--revision N] [--wait SECONDS]
    helm.py uninstall RELEASE -n NS [--wait SECONDS]
    helm.py history RELEASE -n NS
    helm.py push ARCHIVE oci://HOST/PATH [--plain-http]
    helm.py pull oci://HOST/PATH/CHART --version V DEST_DIR [--plain-http]

VALUES files are YAML; each --set-json is a JSON object merged over them (later wins), as
`helm --set-json` does for whole objects. Cluster commands use KUBECONFIG.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SDK_DIR = os.environ.get("HELM_SDK_DIR") or os.path.join(HERE, "..", "target", "helm-sdk")
sys.path.insert(0, SDK_DIR)
try:
    import helm_python as helm
except ImportError as err:
    sys.exit(f"helm.py: the Helm engine is not installed ({err}): run `make helm-sdk` (PyPI helm-python-sdk into {SDK_DIR})")


def merge(base, over):
    """`over` merged into `base` as Helm coalesces user values: maps deeply, the rest replaced."""
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def values(args):
    """The user-supplied values: every -f file, then every --set-json, in order."""
    out = {}
    for path in args.values or []:
        with open(path, encoding="utf-8") as file:
            merge(out, helm.values_from_yaml(file.read()) or {})
    for text in args.set_json or []:
        merge(out, json.loads(text))
    return out


def config(args):
    return helm.Config(namespace=args.namespace)


def wait_options(args):
    """`--wait SECONDS`: Helm's watcher waits for every object to be ready, up to that."""
    if args.wait:
        return {"wait": "watcher", "timeout": args.wait}
    return {}


def cmd_version(_args):
    print(json.dumps({"helm_python": helm.__version__, "helm_c": helm.helm_c_version(), "helm": helm.helm_sdk_version()}))


def cmd_lint(args):
    report = helm.lint(args.chart, values(args), strict=True, namespace=args.namespace)
    severities = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}
    for message in report.get("messages") or []:
        print(f"[{severities.get(message.get('severity'), '?')}] {message.get('path')}: {message.get('error')}")
    failed = [m for m in report.get("messages") or [] if m.get("severity", 0) >= 2] or report.get("errors")
    print(f"{report.get('total_charts_linted', 0)} chart(s) linted, {'failed' if failed else 'no failures'}")
    if failed:
        sys.exit(1)


def cmd_render(args):
    with helm.Chart.load(args.chart) as chart:
        manifests = chart.render(values(args), name=args.name, namespace=args.namespace, is_install=True)
        print(json.dumps({"manifests": manifests, "crds": chart.crds}))


def cmd_schema(args):
    with helm.Chart.load(args.chart) as chart:
        chart.validate_schema(values(args))
    print(json.dumps({"valid": True}))


def cmd_package(args):
    print(json.dumps({"archive": helm.package(args.chart, destination=args.dest)}))


def summary(release):
    """What the tests read of a release: never its manifest (long) unless asked."""
    return {k: v for k, v in release.items() if k not in ("manifest", "chart", "config", "hooks")}


def cmd_install(args):
    release_action(args, "install")


def cmd_upgrade(args):
    release_action(args, "upgrade")


def release_action(args, action):
    """`install` or `upgrade`: the same arguments, the release's summary printed."""
    with config(args) as cfg:
        if args.take_ownership or args.force_conflicts:
            release = ownership_action(cfg, args, action)
        else:
            release = getattr(cfg, action)(
                args.chart,
                args.release,
                values(args),
                namespace=args.namespace,
                chart_version=args.version,
                plain_http=args.plain_http,
                **wait_options(args),
            )
    print(json.dumps(summary(release)))


def ownership_action(cfg, args, action):
    """The same call with Helm's `--take-ownership` / `--force-conflicts`, which the SDK's
    Python wrapper does not pass on: its native call, with the options libhelm_c reads."""
    from helm_python import _native

    handle, ref = cfg._chart_args(args.chart)
    options = {"namespace": args.namespace, "take_ownership": args.take_ownership or None,
               "force_conflicts": args.force_conflicts or None, "chart_version": args.version,
               "plain_http": args.plain_http or None}
    if args.wait:
        options.update({"wait": "watcher", "timeout_seconds": args.wait})
    options = {k: v for k, v in options.items() if v is not None}
    payload = _native.call_string(f"helm_{action}", cfg._raw(), cfg._context_arg(None), handle, ref, args.release,
                                  json.dumps(values(args)), json.dumps(options))
    return json.loads(payload)


def cmd_rollback(args):
    with config(args) as cfg:
        cfg.rollback(args.release, version=args.revision, **wait_options(args))
        release = cfg.status(args.release)
    print(json.dumps(summary(release)))


def cmd_uninstall(args):
    with config(args) as cfg:
        answer = cfg.uninstall(args.release, **wait_options(args))
    print(json.dumps({"info": answer.get("info", "")}))


def cmd_history(args):
    with config(args) as cfg:
        print(json.dumps([summary(r) for r in cfg.history(args.release)]))


def cmd_push(args):
    print(json.dumps(helm.push(args.archive, args.remote, plain_http=args.plain_http)))


def cmd_pull(args):
    os.makedirs(args.dest, exist_ok=True)
    print(json.dumps(helm.pull(args.ref, version=args.version, destination=args.dest, plain_http=args.plain_http)))


def main():
    parser = argparse.ArgumentParser(prog="helm.py", description="The Helm v4 engine (helm-python-sdk) for the chart's tests")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name, func, *, chart=False, release=False, values_too=False, cluster=False):
        sub = commands.add_parser(name)
        if chart:
            sub.add_argument("chart")
        if release:
            sub.add_argument("release")
        if values_too:
            sub.add_argument("-f", "--values", action="append", help="a YAML values file")
            sub.add_argument("--set-json", action="append", help="a JSON object merged over the values")
        if cluster or values_too:
            # Rendering and linting: the namespace the docs install into.
            sub.add_argument("-n", "--namespace", default=None if cluster else "envoy-injector", required=cluster)
        if cluster:
            sub.add_argument("--wait", type=int, help="seconds to wait for every object to be ready")
        sub.set_defaults(func=func)
        return sub

    command("version", cmd_version)
    command("lint", cmd_lint, chart=True, values_too=True)
    command("render", cmd_render, chart=True, values_too=True).add_argument("--name", default="envoy-injector")
    command("schema", cmd_schema, chart=True, values_too=True)
    command("package", cmd_package, chart=True).add_argument("dest")
    for name, func in (("install", cmd_install), ("upgrade", cmd_upgrade)):
        sub = command(name, func, chart=True, release=True, values_too=True, cluster=True)
        sub.add_argument("--version", help="the chart version, with an oci:// reference")
        sub.add_argument("--plain-http", action="store_true", help="the oci:// reference is served over plain HTTP")
        sub.add_argument("--take-ownership", action="store_true", help="adopt objects that exist without Helm's marks")
        sub.add_argument("--force-conflicts", action="store_true", help="server-side apply takes over fields other managers own")
    command("rollback", cmd_rollback, release=True, cluster=True).add_argument("--revision", type=int)
    command("uninstall", cmd_uninstall, release=True, cluster=True)
    command("history", cmd_history, release=True, cluster=True)
    push = command("push", cmd_push)
    push.add_argument("archive")
    push.add_argument("remote")
    push.add_argument("--plain-http", action="store_true")
    pull = command("pull", cmd_pull)
    pull.add_argument("ref")
    pull.add_argument("--version", required=True)
    pull.add_argument("dest")
    pull.add_argument("--plain-http", action="store_true")

    args = parser.parse_args()
    try:
        args.func(args)
    except helm.HelmError as err:
        sys.exit(f"helm.py {args.command}: {err}")


if __name__ == "__main__":
    main()
