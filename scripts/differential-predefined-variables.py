#!/usr/bin/env python3
"""Record which predefined variables gitlab-ci-local gives a job, for flotilla's test to judge.

    scripts/differential-predefined-variables.py

A job of a push pipeline on branch `main` (remote gitlab.example.com/group/sub/proj) prints the
names of its `CI_*` and `GITLAB_*` environment variables under gitlab-ci-local
(`--shell-isolation`). The sorted names go to
crates/flotilla/tests/fixtures/gitlab-ci-local-predefined.json, which the test
`predefined_variables_are_judged_by_gitlab_ci_local` (crates/flotilla/tests/exec_conformance.rs)
compares with what `flotilla exec` gives the same job: every name gitlab-ci-local sets must be
set by flotilla too, or be a listed difference with the GitLab source that says which side is
right.

gitlab-ci-local is found as scripts/differential-gitlab-ci-local.py finds it.
"""
import importlib.util
import json
import os
import subprocess
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "crates", "flotilla", "tests", "fixtures", "gitlab-ci-local-predefined.json")
PIPELINE = """names:
  script:
    - env | cut -d= -f1 | grep -E '^(CI|GITLAB)' | sort | sed 's/^/predefined-name-/'
"""


def gitlab_ci_local():
    spec = importlib.util.spec_from_file_location(
        "differential", os.path.join(ROOT, "scripts", "differential-gitlab-ci-local.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gitlab_ci_local()


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=Flotilla Test", "-c", "user.email=test@flotilla.invalid",
                    *args], cwd=cwd, check=True, capture_output=True)


def main():
    gcl = gitlab_ci_local()
    version = subprocess.run([gcl, "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        project = os.path.join(tmp, "proj")
        os.makedirs(project)
        git(project, "init", "-q", "-b", "main")
        git(project, "remote", "add", "origin", "https://gitlab.example.com/group/sub/proj.git")
        with open(os.path.join(project, ".gitlab-ci.yml"), "w") as f:
            f.write(PIPELINE)
        git(project, "add", ".gitlab-ci.yml")
        git(project, "commit", "-q", "-m", "the pipeline")
        out = subprocess.run([gcl, "--shell-isolation", "names"], cwd=project,
                             capture_output=True, text=True, timeout=300).stdout
    names = sorted({line.split("predefined-name-", 1)[1].strip()
                    for line in out.splitlines()
                    if "predefined-name-" in line and "sed " not in line})
    if not names:
        raise SystemExit(f"gitlab-ci-local printed no names:\n{out}")
    with open(OUT, "w") as f:
        json.dump({"gitlab_ci_local": version, "names": names}, f, indent=1)
        f.write("\n")
    print(f"{len(names)} names from gitlab-ci-local {version} -> {OUT}")


if __name__ == "__main__":
    main()
