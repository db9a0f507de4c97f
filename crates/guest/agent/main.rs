//! flotilla's agent in a guest: PID 1 of a microVM or VM made by flotilla, or a program run
//! by hand (`--stdio`, `--port`, `--vsock`). It runs commands, terminals and connections for
//! the host over one byte stream; see `src/protocol.rs` (compiled into it).
//!
//! Built by `build.rs` of `flotilla-guest` with `rustc` alone (no crates) as a static
//! executable, so it runs in any Linux x86-64 guest whatever the job image holds.

#![allow(dead_code)]

#[path = "../src/protocol.rs"]
mod protocol;

mod builtins;
mod disks;
mod init;
mod net;
mod reaper;
mod serve;
mod spawn;
mod sys;

fn usage() -> ! {
    eprintln!("usage: flotilla-guest-agent --stdio | --port DEVICE | --vsock PORT | --version");
    std::process::exit(2);
}

fn main() {
    if sys::pid() == 1 {
        init::run();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let link: Box<dyn serve::Link> = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["--version"] => {
            println!("flotilla-guest-agent protocol {}", protocol::VERSION);
            return;
        }
        ["--stdio"] => Box::new(serve::StdioLink),
        ["--port", dev] => match serve::PortLink::open(dev) {
            Ok(l) => Box::new(l),
            Err(e) => {
                eprintln!("flotilla-guest-agent: {dev}: {e}");
                std::process::exit(1);
            }
        },
        ["--vsock", port] => match port
            .parse::<u32>()
            .map_err(|e| e.to_string())
            .and_then(|p| serve::ListenLink::vsock(p).map_err(|e| e.to_string()))
        {
            Ok(l) => Box::new(l),
            Err(e) => {
                eprintln!("flotilla-guest-agent: vsock {port}: {e}");
                std::process::exit(1);
            }
        },
        _ => usage(),
    };
    reaper::start();
    serve::serve(link);
}
