//! herd's diagnostics on stderr, through `tracing`: what herd is doing (`herd run: run 3
//! recorded in …`), warnings (`warning: …`), and, with `RUST_LOG`, the libraries' own
//! (sqlx's statements, aya's loader) for a bug report.
//!
//! Results go to stdout (tables, the live view, `wrote …` lines), so stdout can be piped
//! into a pull request while stderr says how the run went. `RUST_LOG` takes the
//! env-filter syntax: `RUST_LOG=debug`, `RUST_LOG=sqlx=debug,herd=info`.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::{
    EnvFilter,
    fmt::{FmtContext, FormatEvent, FormatFields, format::Writer},
    registry::LookupSpan,
};

/// What is shown without `RUST_LOG`: herd's own messages, and only the libraries' errors
/// (sqlx warns about every statement slower than a second, which a loaded disk makes
/// common and a user cannot act on).
const DEFAULT_FILTER: &str = "warn,sqlx=error";

/// herd's lines as a user reads them: an info line is its message, a warning says
/// `warning:`, and debug lines name their level and source.
struct Lines;

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        match *meta.level() {
            Level::INFO => {}
            Level::WARN => write!(w, "warning: ")?,
            Level::ERROR => write!(w, "error: ")?,
            l => write!(w, "{} {}: ", l.as_str().to_lowercase(), meta.target())?,
        }
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Installs the subscriber; herd's own crates log at info unless `RUST_LOG` says otherwise.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        let own = [
            "herd",
            "herd_driver",
            "herd_probe",
            "herd_store",
            "herd_seed",
            "herd_report",
            "herd_testbed",
        ]
        .map(|c| format!("{c}=info"))
        .join(",");
        EnvFilter::new(format!("{DEFAULT_FILTER},{own}"))
    });
    // A second init (tests calling `run` twice in one process) keeps the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(Lines)
        .try_init();
}
