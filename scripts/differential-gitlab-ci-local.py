#!/usr/bin/env python3
"""Run gitlab-ci-local over the compiler's corpus and record what it lists.

    scripts/differential-gitlab-ci-local.py [NAME_FILTER...]

For every pipeline under crates/ci/tests/pipelines/ that includes nothing but local files,
the pipeline is copied into a temporary git repository (branch `main`, remote
gitlab.example.com/group/project, as the corpus test assumes), and `gitlab-ci-local --list-json`
lists its jobs with the variables of the pipeline's options.json (`--variable`,
`--unset-variable`). The answers go to crates/ci/tests/differential/gitlab-ci-local.json, which
the test crates/ci/tests/ci_differential.rs compares with flotilla's compilation: job sets,
stages, `when` and `needs`. Where the two disagree, the test holds the list of known
differences and which side GitLab's source or documentation says is right.

gitlab-ci-local is found as in scripts/bench-exec.sh: $GITLAB_CI_LOCAL, or installed from the
npm registry into ~/.cache/flotilla-bench/gitlab-ci-local (4.73.0 on Node before 22).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CORPUS = os.path.join(ROOT, "crates", "ci", "tests", "pipelines")
OUT = os.path.join(ROOT, "crates", "ci", "tests", "differential", "gitlab-ci-local.json")
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                     "flotilla-bench", "gitlab-ci-local")


def gitlab_ci_local():
    explicit = os.environ.get("GITLAB_CI_LOCAL")
    if explicit:
        return explicit
    binary = os.path.join(CACHE, "node_modules", ".bin", "gitlab-ci-local")
    if not os.path.exists(binary):
        major = int(subprocess.run(["node", "-p", "process.versions.node.split('.')[0]"],
                                   capture_output=True, text=True, check=True).stdout)
        version = os.environ.get("GCL_VERSION") or ("latest" if major >= 22 else "4.73.0")
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", CACHE,
                        f"gitlab-ci-local@{version}"], check=True)
    return binary


def non_local_include(directory):
    """Whether a file of the pipeline includes something other than a local file."""
    for base, _, files in os.walk(directory):
        for name in files:
            if not name.endswith((".yml", ".yaml")):
                continue
            text = open(os.path.join(base, name), encoding="utf-8", errors="replace").read()
            for marker in ("remote:", "project:", "template:", "component:", "- 'http", '- "http',
                           "- http"):
                if marker in text and "include" in text:
                    return marker.strip("- '\"")
    return None


def git(cwd, *args):
    subprocess.run(["git", "-C", cwd, *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "Corpus", "GIT_AUTHOR_EMAIL": "corpus@invalid",
                        "GIT_COMMITTER_NAME": "Corpus", "GIT_COMMITTER_EMAIL": "corpus@invalid"})


def run_one(gcl, directory):
    options = {}
    path = os.path.join(directory, "options.json")
    if os.path.exists(path):
        options = json.load(open(path))
    if options.get("changed_files") is not None:
        return {"skipped": "changed_files cannot be given to gitlab-ci-local"}
    marker = non_local_include(directory)
    if marker:
        return {"skipped": f"includes a non-local file ({marker}); gitlab-ci-local would fetch it"}
    with tempfile.TemporaryDirectory() as tmp:
        repo = os.path.join(tmp, "project")
        shutil.copytree(directory, repo, ignore=shutil.ignore_patterns("expected.json", "outcome.txt",
                                                                       "options.json", "SOURCE"))
        git(repo, "init", "-q", "-b", "main")
        git(repo, "remote", "add", "origin", "https://gitlab.example.com/group/project.git")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "corpus")
        # The remote's default branch, which gitlab-ci-local asks git for.
        git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
        git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
        # The JSON schema check is gitlab-ci-local's own (GitLab validates with its entry
        # classes); it is turned off so that the listing itself can be compared.
        args = [gcl, "--list-json", "--json-schema-validation=false"]
        overridden = []
        for key, value in sorted(options.get("variables", {}).items()):
            overridden.append(key)
            if value is None:
                args += ["--unset-variable", key]
            else:
                args += ["--variable", f"{key}={value}"]
        for key, value in sorted(options.get("user_variables", {}).items()):
            args += ["--variable", f"{key}={value}"]
        # Standard output goes to a file: gitlab-ci-local exits before a pipe is drained, which
        # cuts long listings at 128 KiB.
        listing = os.path.join(tmp, "listing.json")
        try:
            with open(listing, "w") as out:
                done = subprocess.run(args, cwd=repo, stdout=out, stderr=subprocess.PIPE, text=True,
                                      timeout=120,
                                      env={**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0",
                                           "GCL_IGNORE_PREDEFINED_VARS": ",".join(overridden)})
        except subprocess.TimeoutExpired:
            return {"error": "timed out after 120 s"}
        done.stdout = open(listing, encoding="utf-8").read()
        lines = done.stdout.splitlines(keepends=True)
        first = next((i for i, l in enumerate(lines) if l.rstrip() in ("[", "[]")), None)
        start = -1 if first is None else sum(len(l) for l in lines[:first])
        if done.returncode != 0 or start < 0:
            lines = [l.strip() for l in (done.stderr + done.stdout).splitlines()
                     if l.strip() and not l.strip().startswith("at ")]
            errors = [l for l in lines if "rror" in l or "not" in l.lower()] or lines
            return {"error": " | ".join(errors[:3])[:400] if errors else f"exit {done.returncode}"}
        listed = json.loads(done.stdout[start:])
        jobs = []
        for job in listed:
            needs = job.get("needs")
            jobs.append({
                "name": job["name"],
                "stage": job["stage"],
                "when": job["when"],
                "allow_failure": job.get("allow_failure"),
                "needs": None if needs is None else [n["job"] for n in needs],
            })
        return {"jobs": jobs}


def main():
    gcl = gitlab_ci_local()
    version = subprocess.run([gcl, "--version"], capture_output=True, text=True).stdout.strip()
    filters = sys.argv[1:]
    results = {}
    if os.path.exists(OUT) and filters:
        results = json.load(open(OUT))["pipelines"]
    for name in sorted(os.listdir(CORPUS)):
        directory = os.path.join(CORPUS, name)
        if not os.path.exists(os.path.join(directory, ".gitlab-ci.yml")):
            continue
        if filters and not any(f in name for f in filters):
            continue
        results[name] = run_one(gcl, directory)
        status = ("skipped" if "skipped" in results[name] else
                  "error" if "error" in results[name] else f"{len(results[name]['jobs'])} jobs")
        print(f"{name}: {status}", file=sys.stderr)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"gitlab-ci-local": version, "pipelines": results}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
