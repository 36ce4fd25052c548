//! Whether a TCP connection to the service comes from one of its own agents. An agent runs
//! arbitrary shell commands in the service's network namespace; if it could call the
//! service's API it could answer its own permission requests, or act as any tenant when the
//! service runs without tokens. So every accepted connection whose peer socket is on this
//! host is traced to its owner: its uid is an agent account's (when agents run under uids of
//! their own: robust, an agent cannot change its uid), or the process holding it carries the
//! launch marker every agent and descendant inherits (without separate uids: best effort, a
//! process exec'd with a cleared environment loses it). Such a connection is closed before a
//! byte is read.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::ledger::LAUNCH_MARKER_VARIABLE;

/// How the service tells its agents' connections from anyone else's.
#[derive(Debug, Clone)]
pub enum AgentCallers {
    /// Agents run under these uids (and nothing else does).
    Uids(BTreeSet<u32>),
    /// Agents share the service's uid: the launch marker in the owner's environment.
    LaunchMarker,
}

/// Who an agent's connection belongs to, for the log line that reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCaller {
    pub uid: u32,
    /// The process holding the socket, when it was looked for (marker mode).
    pub pid: Option<i32>,
}

/// A socket of this host's TCP tables (`/proc/net/tcp`, `/proc/net/tcp6`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HostSocket {
    uid: u32,
    inode: u64,
}

impl AgentCallers {
    /// The agent behind a connection from `peer` to the service's `local` address, if the
    /// peer socket is on this host and an agent's.
    pub fn agent_behind(&self, peer: SocketAddr, local: SocketAddr) -> Option<AgentCaller> {
        let socket = host_socket(canonical(peer), canonical(local))?;
        match self {
            Self::Uids(uids) => uids.contains(&socket.uid).then_some(AgentCaller {
                uid: socket.uid,
                pid: None,
            }),
            Self::LaunchMarker => socket_owners(socket.inode)
                .into_iter()
                .find(|pid| crate::procfs::environ_sets(*pid, LAUNCH_MARKER_VARIABLE))
                .map(|pid| AgentCaller {
                    uid: socket.uid,
                    pid: Some(pid),
                }),
        }
    }
}

fn canonical(address: SocketAddr) -> SocketAddr {
    SocketAddr::new(address.ip().to_canonical(), address.port())
}

/// The socket whose local end is `peer` and remote end `local`: the client's side.
fn host_socket(peer: SocketAddr, local: SocketAddr) -> Option<HostSocket> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .into_iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .find_map(|text| find_socket(&text, peer, local))
}

/// Parses a `/proc/net/tcp{,6}` table for the socket `local_end → remote_end`.
fn find_socket(table: &str, local_end: SocketAddr, remote_end: SocketAddr) -> Option<HostSocket> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, remote) = (parse_endpoint(fields.get(1)?)?, parse_endpoint(fields.get(2)?)?);
        (local == local_end && remote == remote_end).then_some(HostSocket {
            uid: fields.get(7)?.parse().ok()?,
            inode: fields.get(9)?.parse().ok()?,
        })
    })
}

/// `0100007F:1F90` (IPv4) or 32 hex digits `:port` (IPv6): each 32-bit word of the address
/// printed as a host-order integer, the port as a plain hex number.
fn parse_endpoint(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..address.len() / 8)
        .map(|i| u32::from_str_radix(address.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let ip = match words[..] {
        [word] => IpAddr::V4(Ipv4Addr::from(word.to_ne_bytes())),
        [a, b, c, d] => {
            let bytes: Vec<u8> = [a, b, c, d].iter().flat_map(|w| w.to_ne_bytes()).collect();
            IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip.to_canonical(), port))
}

/// The processes holding socket `inode` open (`/proc/<pid>/fd/* -> socket:[inode]`).
fn socket_owners(inode: u64) -> Vec<i32> {
    let target = format!("socket:[{inode}]");
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    processes
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == target.as_str()))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:C350 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A1B2 0100007F:C350 01 00000000:00000000 00:00000000 00000000 61003        0 2222 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn the_client_end_of_a_loopback_connection_is_found_with_its_uid_and_inode() {
        let peer: SocketAddr = "127.0.0.1:41394".parse().unwrap();
        let service: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        assert_eq!(
            find_socket(TABLE, peer, service),
            Some(HostSocket {
                uid: 61003,
                inode: 2222
            })
        );
        assert_eq!(
            find_socket(TABLE, service, peer),
            None,
            "the service's own end is not the caller"
        );
    }

    #[test]
    fn ipv6_and_v4_mapped_endpoints_parse_as_the_kernel_prints_them() {
        assert_eq!(
            parse_endpoint("00000000000000000000000001000000:1F90"),
            Some("[::1]:8080".parse().unwrap())
        );
        assert_eq!(
            parse_endpoint("0000000000000000FFFF00000100007F:1F90"),
            Some("127.0.0.1:8080".parse().unwrap()),
            "an IPv4 client of a dual-stack listener"
        );
    }

    #[test]
    fn a_connection_of_this_process_is_found_in_the_live_tables_and_is_no_agent() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server_end, peer) = listener.accept().unwrap();
        let socket = host_socket(peer, listener.local_addr().unwrap()).expect("in /proc/net/tcp");
        assert_eq!(socket.uid, nix::unistd::getuid().as_raw());
        assert!(socket_owners(socket.inode).contains(&(std::process::id() as i32)));
        let callers = AgentCallers::Uids(BTreeSet::from([socket.uid + 1]));
        assert_eq!(callers.agent_behind(peer, listener.local_addr().unwrap()), None);
        assert_eq!(
            AgentCallers::LaunchMarker.agent_behind(peer, listener.local_addr().unwrap()),
            None,
            "the test process carries no launch marker"
        );
        drop(client);
    }

    #[test]
    fn a_connection_under_an_agent_uid_is_an_agents() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server_end, peer) = listener.accept().unwrap();
        let me = nix::unistd::getuid().as_raw();
        let callers = AgentCallers::Uids(BTreeSet::from([me]));
        assert_eq!(
            callers.agent_behind(peer, listener.local_addr().unwrap()),
            Some(AgentCaller { uid: me, pid: None })
        );
    }
}
