//! Isolation levels: shell, cgroup, docker, microvm, vm, instance, each preparing an environment per job.
