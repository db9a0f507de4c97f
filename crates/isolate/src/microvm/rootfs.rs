//! A job image as a VM's root file system: exported from the instance's Docker engine into a
//! sparse ext4 image, cached by the image's id so each image is converted once per instance.
//!
//! The conversion runs on the instance as one shell script ([`ensure_script`], pure), whose
//! output ([`Rootfs::parse`]) names the image's id, the file and the image's configuration
//! (`ENV`, and for services `ENTRYPOINT`, `CMD`, `WORKDIR`, `EXPOSE`). Two jobs
//! converting the same image at once take turns on a lock; a failed conversion leaves no
//! file behind (it is written under a temporary name and renamed).

use crate::IsolateError;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ConnectorExt};

/// A root file system ready on the instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rootfs {
    /// The image's id (`sha256:...`).
    pub image_id: String,
    /// The ext4 image on the instance.
    pub path: String,
    /// The image's `ENV` (`KEY=VALUE` entries split at the first `=`).
    pub env: Vec<(String, String)>,
    /// The image's `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
    /// The image's `CMD`.
    pub cmd: Vec<String>,
    /// The image's `WORKDIR` (empty: `/`).
    pub working_dir: String,
    /// The ports the image exposes (`6379/tcp`).
    pub exposed_ports: Vec<String>,
    /// Whether this call made it (else it was cached).
    pub made: bool,
}

/// The script that finds or makes the root file system of `image` under `dir`, with
/// `free_mib` MiB free beyond the image's files. It prints `id=`, `path=`, `made=` and
/// `config=` (the image's configuration as JSON, as `docker image inspect` gives it) lines.
pub fn ensure_script(image: &str, dir: &str, free_mib: u64) -> String {
    let image = quote(image);
    let dir = quote(dir);
    format!(
        r#"set -e
img={image}
dir={dir}
fmt='{{{{.Id}}}} {{{{json .Config}}}}'
info=$(docker image inspect -f "$fmt" "$img" 2>/dev/null) || {{
  docker pull -q "$img" >/dev/null
  info=$(docker image inspect -f "$fmt" "$img")
}}
id=${{info%% *}}
key=$(printf %s "${{id#sha256:}}" | cut -c1-32)
out="$dir/$key.ext4"
made=0
mkdir -p "$dir"
if [ ! -f "$out" ]; then
  exec 9>"$dir/.lock"
  flock 9
  if [ ! -f "$out" ]; then
    work=$(mktemp -d "$dir/.build-XXXXXX")
    cid=
    trap 'rm -rf "$work"; [ -z "$cid" ] || docker rm -f "$cid" >/dev/null 2>&1 || true' EXIT
    cid=$(docker create "$img" sh)
    mkdir "$work/root"
    docker export "$cid" | tar -C "$work/root" -xf -
    kib=$(du -sk "$work/root" | cut -f1)
    mke2fs -q -F -t ext4 -O ^has_journal -E root_owner=0:0 -d "$work/root" "$work/image" "$(( kib + kib / 4 + {free} ))K"
    mv -f "$work/image" "$out"
    made=1
  fi
fi
echo "id=$id"
echo "path=$out"
echo "made=$made"
echo "config=${{info#* }}"
"#,
        free = free_mib * 1024
    )
}

impl Rootfs {
    /// Reads what [`ensure_script`] printed.
    pub fn parse(out: &str) -> Result<Rootfs, String> {
        let mut id = None;
        let mut path = None;
        let mut made = false;
        let mut config = ImageConfig::default();
        for line in out.lines() {
            if let Some(v) = line.strip_prefix("id=") {
                id = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("path=") {
                path = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("made=") {
                made = v.trim() == "1";
            } else if let Some(v) = line.strip_prefix("config=") {
                let v = v.trim();
                if v != "null" && !v.is_empty() {
                    config = serde_json::from_str(v)
                        .map_err(|e| format!("the image's configuration is unreadable: {e}"))?;
                }
            }
        }
        match (id, path) {
            (Some(image_id), Some(path)) if image_id.starts_with("sha256:") => Ok(Rootfs {
                image_id,
                path,
                env: config
                    .env
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|e| e.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                entrypoint: config.entrypoint.unwrap_or_default(),
                cmd: config.cmd.unwrap_or_default(),
                working_dir: config.working_dir.unwrap_or_default(),
                exposed_ports: config
                    .exposed_ports
                    .map(|p| p.into_keys().collect())
                    .unwrap_or_default(),
                made,
            }),
            _ => Err(format!("no image id and path in: {}", out.trim())),
        }
    }
}

/// The parts of an image's `Config` (Docker's image inspect) the level uses; Docker writes
/// `null` for what an image leaves unset.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ImageConfig {
    env: Option<Vec<String>>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    working_dir: Option<String>,
    exposed_ports: Option<std::collections::BTreeMap<String, serde_json::Value>>,
}

/// Finds or makes `image`'s root file system under `dir` on the instance.
pub async fn ensure(
    connector: &dyn Connector,
    instance: &str,
    image: &str,
    dir: &str,
    free_mib: u64,
) -> Result<Rootfs, IsolateError> {
    let line = format!("sh -c {}", quote(&ensure_script(image, dir, free_mib)));
    let out = connector
        .output(&line)
        .await
        .map_err(|source| IsolateError::Connect {
            instance: instance.to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(IsolateError::Docker {
            instance: instance.to_string(),
            what: format!("making a root file system of image {image}"),
            message: out.stderr_str().trim().to_string(),
        });
    }
    Rootfs::parse(&out.stdout_str()).map_err(|message| IsolateError::Docker {
        instance: instance.to_string(),
        what: format!("making a root file system of image {image}"),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_output_names_the_image_file_and_env() {
        let r = Rootfs::parse(
            "id=sha256:abc\npath=/s/rootfs/abc.ext4\nmade=1\nconfig={\"Env\":[\"PATH=/usr/bin:/bin\",\"A=b=c\"],\
             \"Entrypoint\":[\"docker-entrypoint.sh\"],\"Cmd\":[\"redis-server\"],\
             \"WorkingDir\":\"/data\",\"ExposedPorts\":{\"6379/tcp\":{}},\"Labels\":null}\n",
        )
        .unwrap();
        assert_eq!(r.image_id, "sha256:abc");
        assert_eq!(r.path, "/s/rootfs/abc.ext4");
        assert!(r.made);
        assert_eq!(
            r.env,
            [
                ("PATH".to_string(), "/usr/bin:/bin".to_string()),
                ("A".into(), "b=c".into())
            ]
        );
        assert_eq!(r.entrypoint, ["docker-entrypoint.sh"]);
        assert_eq!(r.cmd, ["redis-server"]);
        assert_eq!(r.working_dir, "/data");
        assert_eq!(r.exposed_ports, ["6379/tcp"]);
        let r = Rootfs::parse("id=sha256:abc\npath=/x\nmade=0\nconfig=null\n").unwrap();
        assert!(!r.made && r.env.is_empty() && r.cmd.is_empty());
        let r = Rootfs::parse(
            "id=sha256:abc\npath=/x\nmade=0\nconfig={\"Env\":null,\"Cmd\":null,\"Entrypoint\":null}\n",
        )
        .unwrap();
        assert!(r.env.is_empty() && r.entrypoint.is_empty());
        assert!(Rootfs::parse("Error: No such image\n").is_err());
        assert!(Rootfs::parse("id=\npath=/x\n").is_err());
    }

    #[test]
    fn the_script_is_valid_sh_with_the_image_quoted() {
        let s = ensure_script("my image;rm -rf /", "/state/rootfs", 1024);
        assert!(s.contains("img='my image;rm -rf /'"), "{s}");
        assert!(s.contains("{{.Id}} {{json .Config}}"), "{s}");
        assert!(s.contains("+ 1048576 ))K"), "{s}");
        let st = std::process::Command::new("sh")
            .args(["-n", "-c", &s])
            .status()
            .unwrap();
        assert!(st.success());
    }
}
