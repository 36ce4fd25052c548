//! `--ready-file`: once every listener is bound, the addresses they took are written to
//! one JSON file, atomically (a temporary file renamed over it). A supervisor or a test
//! that asks for port 0 reads the ports the kernel gave instead of guessing a free one,
//! which another process could take before the service binds it.

use std::net::SocketAddr;
use std::path::Path;

/// The bound addresses, as the file holds them (`null`: that listener is off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Listening {
    pub grpc: SocketAddr,
    pub metrics: Option<SocketAddr>,
    pub internal: Option<SocketAddr>,
}

/// Writes `listening` to `path`: readers see the whole file or none.
pub fn write(path: &Path, listening: &Listening) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer(&mut file, listening)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_every_bound_address_and_replaces_an_older_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ready.json");
        std::fs::write(&path, "stale").unwrap();
        let listening = Listening {
            grpc: "127.0.0.1:41001".parse().unwrap(),
            metrics: None,
            internal: Some("127.0.0.1:41002".parse().unwrap()),
        };
        write(&path, &listening).unwrap();
        let read: Listening = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(read, listening);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }
}
