//! GitLab: the runner API job source, the .gitlab-ci.yml compiler, the custom-executor driver.
