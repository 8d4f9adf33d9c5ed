//! The live view on stdout: [`herd_report::text::live`]'s block redrawn in place on a
//! terminal (re-cut to the terminal's width before every block, so a resized window does not
//! wrap), its logfmt lines anywhere else.

use std::io::IsTerminal as _;

use herd_driver::Scenario;
use herd_model::{DriverInterval, ProbeInterval};
use herd_report::text::live::{Live, Style};

/// The live view of one run on stdout.
#[derive(Debug)]
pub struct LiveView {
    live: Live,
    terminal: bool,
}

impl LiveView {
    /// The block on a terminal stdout, logfmt lines otherwise, for `scenario`'s plan.
    pub fn for_stdout(scenario: &Scenario) -> Self {
        let terminal = std::io::stdout().is_terminal();
        let style = if terminal {
            Style::Terminal {
                width: terminal_width().unwrap_or(100),
            }
        } else {
            Style::Lines
        };
        Self {
            live: Live::new(style, scenario.plan().len()).planned(scenario.planned_secs()),
            terminal,
        }
    }

    /// What to write for this interval (see [`Live::interval`]).
    pub fn interval(&mut self, iv: &DriverInterval) -> String {
        if self.terminal
            && let Some(w) = terminal_width()
        {
            self.live.set_width(w);
        }
        self.live.interval(iv)
    }

    /// The probe's latest interval (see [`Live::probe`]).
    pub fn probe(&mut self, iv: &ProbeInterval) {
        self.live.probe(iv);
    }

    /// Something else was written after the block (see [`Live::written_below`]).
    pub fn written_below(&mut self) {
        self.live.written_below();
    }
}

/// Columns of the terminal on stdout.
fn terminal_width() -> Option<usize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the pointed-to struct, which lives for
    // the call.
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}
