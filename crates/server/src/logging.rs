//! Log output in nats-server's line format, which client test harnesses
//! read: `[pid] 2006/01/02 15:04:05.000000 [INF] message`.

use std::fmt;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use time::{OffsetDateTime, UtcOffset};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::reload;

struct NatsFormat {
    pid: u32,
    logtime: bool,
    /// Read once at start: asking later is unsound once threads run.
    offset: UtcOffset,
}

impl<S, N> FormatEvent<S, N> for NatsFormat
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
        write!(w, "[{}] ", self.pid)?;
        if self.logtime {
            let t = OffsetDateTime::now_utc().to_offset(self.offset);
            write!(
                w,
                "{:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:06} ",
                t.year(),
                t.month() as u8,
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.microsecond()
            )?;
        }
        let label = match *event.metadata().level() {
            Level::ERROR => "[ERR]",
            Level::WARN => "[WRN]",
            Level::INFO => "[INF]",
            Level::DEBUG => "[DBG]",
            Level::TRACE => "[TRC]",
        };
        write!(w, "{label} ")?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// Where lines go: stderr, or a file opened for append.
#[derive(Clone)]
enum Sink {
    Stderr,
    File(Arc<Mutex<std::fs::File>>),
}

struct SinkWriter(Sink);

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &self.0 {
            Sink::Stderr => std::io::stderr().write(buf),
            Sink::File(f) => f.lock().unwrap_or_else(|e| e.into_inner()).write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &self.0 {
            Sink::Stderr => std::io::stderr().flush(),
            Sink::File(f) => f.lock().unwrap_or_else(|e| e.into_inner()).flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = SinkWriter;
    fn make_writer(&'a self) -> Self::Writer {
        SinkWriter(self.clone())
    }
}

/// Lets a config reload change verbosity, and SIGUSR1 reopen the file.
#[derive(Clone)]
pub struct LogHandle {
    filter: reload::Handle<LevelFilter, tracing_subscriber::Registry>,
    sink: Sink,
    path: Option<PathBuf>,
}

impl LogHandle {
    pub fn set_level(&self, debug: bool, trace: bool) {
        let _ = self.filter.modify(|f| *f = level(debug, trace));
    }

    /// Opens the log file again by its name, so that a rotated-away file
    /// is let go (nats-server's `ReOpenLogFile`). Logs the outcome.
    pub fn reopen(&self) {
        let (Sink::File(file), Some(path)) = (&self.sink, &self.path) else {
            tracing::info!("File log re-open ignored, not a file logger");
            return;
        };
        match OpenOptions::new().create(true).append(true).open(path) {
            Ok(new) => {
                *file.lock().unwrap_or_else(|e| e.into_inner()) = new;
                tracing::info!("File log re-opened");
            }
            Err(e) => tracing::error!("File log re-open failed: {e}"),
        }
    }
}

fn level(debug: bool, trace: bool) -> LevelFilter {
    if trace {
        LevelFilter::TRACE
    } else if debug {
        LevelFilter::DEBUG
    } else {
        LevelFilter::INFO
    }
}

/// Installs the global logger. Call before starting any threads.
pub fn init(
    debug: bool,
    trace: bool,
    logtime: bool,
    logfile: Option<&Path>,
) -> std::io::Result<LogHandle> {
    let sink = match logfile {
        Some(path) => Sink::File(Arc::new(Mutex::new(
            OpenOptions::new().create(true).append(true).open(path)?,
        ))),
        None => Sink::Stderr,
    };
    let (filter, handle) = reload::Layer::new(level(debug, trace));
    let fmt = tracing_subscriber::fmt::layer()
        .event_format(NatsFormat {
            pid: std::process::id(),
            logtime,
            offset: UtcOffset::current_local_offset().unwrap_or(UtcOffset::UTC),
        })
        .with_writer(sink.clone());
    tracing_subscriber::registry().with(filter).with(fmt).init();
    Ok(LogHandle {
        filter: handle,
        sink,
        path: logfile.map(Path::to_path_buf),
    })
}
