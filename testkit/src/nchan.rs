//! The chat seed's server (examples/seeds/README.md, seed 003): nginx with Debian's nchan
//! module, one nginx.conf for the tests that run it, so they and the README cannot drift.

use std::path::Path;

/// The nchan module as Debian installs it (`cargo xtask setup`: libnginx-mod-nchan).
pub const MODULE: &str = "/usr/lib/nginx/modules/ngx_nchan_module.so";

/// How nginx runs its processes.
#[derive(Clone, Copy, Debug)]
pub enum Processes {
    /// A master and one worker (SIGTERM to the master stops both).
    MasterAndWorker,
    /// One process (`master_process off`), so a SIGKILL stops all of nginx.
    One,
}

/// The nginx.conf of the chat seed's server listening on `listen` (`127.0.0.1:8080`), its
/// pid file, logs (`access.log`, `error.log`) and temp paths under `dir`.
pub fn conf(dir: &Path, listen: &str, processes: Processes) -> String {
    let d = dir.display();
    let procs = match processes {
        Processes::MasterAndWorker => "master_process on;\nworker_processes 1;",
        Processes::One => "master_process off;",
    };
    format!(
        "load_module {MODULE};
daemon off;
{procs}
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen {listen};
    location = /healthz {{ default_type application/json; return 200 '{{\"ok\":true}}'; }}
    # A registration: nginx's random request id stands for an account's inbox.
    location = /register {{ default_type application/json; return 200 '{{\"id\":\"$request_id\"}}'; }}
    location = /presence {{ return 204; }}
    # A buffer: a message published while its reader is between two polls waits for the
    # next one, which asks for the message after the last it got (Etag, Last-Modified).
    location = /pub {{ nchan_publisher; nchan_channel_id $arg_id; nchan_message_buffer_length 64; }}
    location = /sub {{ nchan_subscriber longpoll; nchan_channel_id $arg_id; nchan_subscriber_first_message oldest; }}
  }}
}}
"
    )
}
