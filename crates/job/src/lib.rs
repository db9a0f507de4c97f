//! The job model (GitLab's job payload), stage scripts, trace and masking, artifacts and cache.
