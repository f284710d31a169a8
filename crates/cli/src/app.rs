//! The `crossbow` command line: `train`, `models`, `bench`, `experiment tta`, with the
//! synchronisers of a [`SyncRegistry`]. Bad input gives one clear error line and exit code 2;
//! failures while running give exit code 1. `src/main.rs` is [`main_with`] with the built-in
//! synchronisers; a researcher's binary is the same with their own added.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use crossbow_replica::ModelKind;

use crate::config::TrainFile;
use crate::error::SessionError;
use crate::registry::{SyncOptions, SyncRegistry, parse_sync_opt};
use crate::{experiment, models_cmd};

#[derive(Parser)]
#[command(
    name = "crossbow",
    version,
    about = "Train small-batch model replicas, many per device, kept consistent by synchronous model averaging"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model (defaults: LeNet-5 on the built-in synthetic digits, on this machine's CPU).
    Train(Box<TrainArgs>),
    /// Print parameters, FLOPs and planned memory of every model.
    Models(ModelsArgs),
    /// Measure training throughput (images/s) per model, batch size and learners per device.
    Bench(bench_cli::BenchArgs),
    /// Statistical-efficiency experiments.
    #[command(subcommand)]
    Experiment(ExperimentCmd),
    /// Write a checkpoint's central model as a safetensors file PyTorch loads (docs/export.md).
    Export(crate::export_cmd::ExportArgs),
    /// Explore several configurations as one job from one data pipeline, prune the losers
    /// early and write the best as a config file (docs/explore.md).
    Explore(crate::explore::ExploreArgs),
    /// Check the GPUs: driver, CUDA libraries, devices, cuDNN, and every op against the CPU
    /// on every GPU (exit 0 when all pass or there is no GPU).
    Doctor(crate::doctor::DoctorArgs),
}

#[derive(Subcommand)]
enum ExperimentCmd {
    /// Epochs and time to a target accuracy: SMA against S-SGD over learners and batch sizes.
    Tta(experiment::TtaArgs),
}

/// The flags of `crossbow train` that are not settings of the run; every setting of the
/// table in [`crate::settings`] is a flag too (added from the table, see [`command`]).
#[derive(Args, Debug, Default)]
struct TrainArgs {
    /// A TOML file with any of these settings (keys as the flag names, e.g. `batch-size = 64`);
    /// flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// A synchroniser option KEY=VALUE (repeatable), e.g. `--sync-opt period=4`; in a config
    /// file, a `[sync-options]` table. Flags replace the file's value of the same key.
    #[arg(long = "sync-opt", value_name = "KEY=VALUE", value_parser = parse_sync_opt)]
    sync_opt: Vec<(String, String)>,
    /// Continue the run saved in this checkpoint file, or in the newest good checkpoint of
    /// this folder (a folder holding several lines of one run: the line written last);
    /// checkpoints are then written into the folder resumed from (or --checkpoint-dir).
    /// Other flags given override the saved ones where that is possible (epochs, target,
    /// devices, threads, learners, metrics, checkpoints, a lower --lr)
    #[arg(long, value_name = "DIR|FILE")]
    resume: Option<PathBuf>,
    /// Print only the final summary
    #[arg(long, short)]
    quiet: bool,
    /// Print the resolved configuration and the model's memory plan, then exit
    #[arg(long)]
    dry_run: bool,
}

/// The settings given as flags of `crossbow train` (those of [`crate::settings::SETTINGS`]
/// present in `m`), with the `--sync-opt` options.
fn settings_from_flags(m: &clap::ArgMatches, sync_opt: &[(String, String)]) -> Result<TrainFile, SessionError> {
    let mut f = TrainFile::default();
    for s in crate::settings::SETTINGS {
        if s.switch {
            if m.get_flag(s.key) {
                f.set_flag(s.key, "true").map_err(|e| SessionError::usage(format!("--{}: {e}", s.key)))?;
            }
        } else if let Some(v) = m.get_one::<String>(s.key) {
            f.set_flag(s.key, v).map_err(|e| SessionError::usage(format!("--{} {e}", s.key)))?;
        }
    }
    f.sync_options = (!sync_opt.is_empty())
        .then(|| sync_opt.iter().map(|(k, v)| (k.clone(), toml::Value::String(v.clone()))).collect());
    Ok(f)
}

/// The flags of every setting of the table, for `crossbow train`.
fn setting_args(c: clap::Command) -> clap::Command {
    crate::settings::SETTINGS.iter().fold(c, |c, s| {
        let help = s.help.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
        let arg = clap::Arg::new(s.key).long(s.key).help(help);
        let arg = if s.switch {
            arg.action(clap::ArgAction::SetTrue)
        } else {
            // The command line is built once per process: its value names may live as long.
            let name: &'static str = Box::leak(s.key.to_ascii_uppercase().replace('-', "_").into_boxed_str());
            arg.value_name(name).action(clap::ArgAction::Set)
        };
        c.arg(arg)
    })
}

#[derive(Args)]
struct ModelsArgs {
    /// Models to list [default: all]
    #[arg(long, value_delimiter = ',')]
    model: Vec<String>,
    /// Batch size for the memory figures
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Side of the square input images (as `train --image-size` for folder data) [default:
    /// each model's own: 28, 32 or 224]
    #[arg(long)]
    image_size: Option<usize>,
}

mod bench_cli {
    use clap::Args;
    use std::path::PathBuf;

    use crate::registry::parse_sync_opt;

    #[derive(Args)]
    pub struct BenchArgs {
        /// The synchroniser, by name (the list is filled in from the registry) [default: each
        /// model's, as in `crossbow train`]
        #[arg(long)]
        pub sync: Option<String>,
        /// A synchroniser option KEY=VALUE (repeatable)
        #[arg(long = "sync-opt", value_name = "KEY=VALUE", value_parser = parse_sync_opt)]
        pub sync_opt: Vec<(String, String)>,
        /// Models [default: lenet5,resnet20,resnet32]
        #[arg(long, value_delimiter = ',')]
        pub model: Vec<String>,
        /// Batch sizes per learner
        #[arg(long, value_delimiter = ',', default_value = "16,32,128")]
        pub batch_size: Vec<usize>,
        /// Learners per device to measure (under mpirun/srun: on each device of every rank,
        /// all ranks training together)
        #[arg(long, value_delimiter = ',', default_value = "1")]
        pub learners: Vec<usize>,
        /// auto | cpu | cpu:N | cuda | cuda:0,1
        #[arg(long, default_value = "auto")]
        pub devices: String,
        /// Threads per CPU device
        #[arg(long)]
        pub threads: Option<usize>,
        /// Measured iterations per configuration
        #[arg(long, default_value_t = 20)]
        pub iterations: usize,
        /// Unmeasured iterations first
        #[arg(long, default_value_t = 3)]
        pub warmup: usize,
        /// When the learners' losses are read: now (every iteration) or lagged (one
        /// iteration late) [default: lagged when every device is a GPU, else now]
        #[arg(long, value_name = "now|lagged")]
        pub loss_read: Option<crossbow_replica::engine::LossRead>,
        /// Also run the auto-tuner from one learner and report what it picks (one process only)
        #[arg(long)]
        pub tuner: bool,
        /// Most learners per device the tuner may use
        #[arg(long, default_value_t = 6)]
        pub max_learners: usize,
        /// Write the rows as JSON to this file (under mpirun/srun: rank 0 writes it)
        #[arg(long)]
        pub json: Option<PathBuf>,
        /// Under mpirun/srun: seconds a collective between ranks may take before the job
        /// stops, naming the ranks that never reached it [default: 60]
        #[arg(long, value_name = "SECONDS")]
        pub mpi_timeout: Option<f64>,
        /// An image folder (DIR/train/<class>/*.jpg|png, as `crossbow train --dataset folder`):
        /// the models take its image size and classes, and every row also measures the input
        /// pipeline alone (random-resized crop, flip, normalise from the decoded images) and
        /// says whether the input or the model bounds an iteration (one process only)
        #[arg(long, value_name = "DIR")]
        pub folder: Option<PathBuf>,
        /// Side of the folder's images, in pixels [default: 224]
        #[arg(long, value_name = "S", requires = "folder")]
        pub image_size: Option<usize>,
        /// Worker threads of the input pipeline measured with --folder [default: 2, as train]
        #[arg(long, value_name = "N", requires = "folder")]
        pub workers: Option<usize>,
    }
}

fn run(cli: Cli, matches: &clap::ArgMatches, registry: &SyncRegistry) -> Result<(), SessionError> {
    match cli.command {
        Command::Train(a) => {
            let file = match &a.config {
                Some(p) => Some((p.clone(), TrainFile::read_with(p, registry)?)),
                None => None,
            };
            let flags = settings_from_flags(
                matches.subcommand_matches("train").ok_or_else(|| SessionError::run("internal: train's flags"))?,
                &a.sync_opt,
            )?;
            let mut session = crossbow_session::Session::from_sources(file, flags)?
                .registry(registry.clone())
                .quiet(a.quiet)
                .handle_signals(true);
            if let Some(p) = &a.resume {
                session = session.resume(p);
            }
            if a.dry_run {
                let cfg = session.resolve()?;
                println!("{}", serde_json::to_string_pretty(&cfg).map_err(SessionError::run)?);
                // The model as this run builds it: the dataset's image shape and classes (a
                // folder's classes are its class folders).
                let data = if cfg.dataset == crossbow_data::DatasetKind::Folder {
                    let side = cfg.image_size.unwrap_or(crossbow_data::DEFAULT_IMAGE_SIZE);
                    let classes = crossbow_data::folder_classes(&cfg.data_dir)?.len();
                    ([3, side, side], classes)
                } else {
                    (cfg.dataset.image_shape(), cfg.dataset.num_classes())
                };
                let rows = models_cmd::table(&[cfg.model], cfg.batch_size, None, Some(data))?;
                models_cmd::print(&rows);
                return Ok(());
            }
            session.run().map(|_| ())
        }
        Command::Export(a) => crate::export_cmd::run(&a),
        Command::Doctor(a) => {
            die_quietly_on_broken_pipe();
            crate::doctor::run(&a)
        }
        Command::Explore(a) => crate::explore::run(&a, registry),
        Command::Models(a) => {
            die_quietly_on_broken_pipe();
            let models: Vec<ModelKind> = if a.model.is_empty() {
                ModelKind::NAMES.iter().filter_map(|n| n.parse().ok()).collect()
            } else {
                a.model
                    .iter()
                    .map(|m| m.parse().map_err(|e: String| SessionError::usage(format!("--model: {e}"))))
                    .collect::<Result<_, _>>()?
            };
            if a.batch_size == 0 {
                return Err(SessionError::usage("--batch-size must be at least 1"));
            }
            if let Some(s) = a.image_size
                && !(8..=4096).contains(&s)
            {
                return Err(SessionError::usage(format!("--image-size must be in 8..=4096, got {s}")));
            }
            models_cmd::print(&models_cmd::table(&models, a.batch_size, a.image_size, None)?);
            Ok(())
        }
        Command::Bench(a) => {
            // Under mpirun/srun every rank measures together (a collective); a rank that
            // fails stops the others.
            crate::bench::tuner_alone(a.tuner)?;
            let world = crate::processes::World::start(a.mpi_timeout)?;
            let req = crate::bench::BenchRequest {
                sync: a.sync.clone(),
                sync_options: a.sync_opt.iter().fold(SyncOptions::new(), |o, (k, v)| o.option(k, v)),
                models: a.model.clone(),
                batches: a.batch_size.clone(),
                learners: a.learners.clone(),
                devices: a.devices.clone(),
                threads: a.threads,
                iterations: a.iterations,
                warmup: a.warmup,
                loss_read: a.loss_read,
                with_tuner: a.tuner,
                max_learners: a.max_learners,
                json: a.json.clone(),
                folder: a.folder.as_ref().map(|dir| crate::bench::FolderInput {
                    dir: dir.clone(),
                    image_size: a.image_size.unwrap_or(crossbow_data::DEFAULT_IMAGE_SIZE),
                    workers: a.workers.unwrap_or(2),
                }),
            };
            let result = crate::bench::run_cli(registry, &req, std::sync::Arc::clone(&world.group));
            if let Err(e) = &result {
                world.stop_all(&format!("error: {e}"), e.exit_code() as u8);
            }
            result
        }
        Command::Experiment(ExperimentCmd::Tta(a)) => experiment::run_tta(&a, registry),
    }
}

/// The command line, with `--sync`'s help listing `registry`'s synchronisers.
fn command(registry: &SyncRegistry) -> clap::Command {
    let names = registry.names().join(" | ");
    let list = registry.describe();
    let list = list.lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n");
    let flags: String = registry.option_flags().iter().map(|(f, o)| format!(" --{f} V is --sync-opt {o}=V.")).collect();
    let one = |default: &str| {
        let (names, list, default, flags) = (names.clone(), list.clone(), default.to_string(), flags.clone());
        move |a: clap::Arg| {
            a.help(format!("{names}{default}")).long_help(format!(
                "The synchroniser, by name{default}:\n{list}\nTheir options: --sync-opt KEY=VALUE.{flags}"
            ))
        }
    };
    let many = {
        let names = names.clone();
        move |a: clap::Arg| a.help(format!("Synchronisers to compare, comma-separated: {names}"))
    };
    Cli::command()
        .mut_subcommand("train", |c| setting_args(c).mut_arg("sync", one(" [default: ssgd, for every model]")))
        .mut_subcommand("bench", |c| c.mut_arg("sync", one(" [default: as crossbow train, ssgd]")))
        .mut_subcommand("experiment", |c| c.mut_subcommand("tta", |t| t.mut_arg("sync", many)))
}

/// The whole `crossbow` command line (`train`, `models`, `bench`, `experiment tta`) with the
/// synchronisers of `registry` selectable by `--sync NAME`: the `main` of `crossbow` itself
/// (with [`SyncRegistry::builtin`]) and of a researcher's binary:
///
/// ```no_run
/// use crossbow_cli::{SyncOptions, SyncRegistry};
/// use crossbow_replica::sync::Independent;
///
/// fn main() -> std::process::ExitCode {
///     let mut registry = SyncRegistry::builtin();
///     // Your type instead, with `impl<B: Backend> Synchroniser<B>`; the closure reads its
///     // options (`opts.parse_or("period", 8)?`) or says what is wrong with them.
///     registry.register("mine", "what it does; options: none", |_opts: &SyncOptions| Ok(Independent::default()));
///     crossbow_cli::main_with(registry)
/// }
/// ```
///
/// Parses the process arguments; prints help, version and argument errors as clap does;
/// reports any other error as one line `<program>: error: ...` and returns exit code 2 for
/// bad input, 1 for failures while running.
pub fn main_with(registry: SyncRegistry) -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let program = args
        .first()
        .and_then(|a| Path::new(a).file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "crossbow".into());
    let args = registry.expand_option_flags(args);
    let matches = command(&registry).get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // Under a launcher the rank says who speaks (lines of several ranks share a terminal).
    let who = match crossbow_mpi::detect() {
        Ok(Some(l)) if l.size > 1 => format!("{program} (rank {})", l.rank),
        _ => program,
    };
    // One write per message, so that lines of several ranks never run together.
    let say = |line: String| {
        use std::io::Write;
        let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
    };
    // A bad CROSSBOW_CPU_ISA or CROSSBOW_WINOGRAD is refused before anything runs (the
    // kernels would otherwise fall back silently).
    if let Err(e) = crossbow_kernels::cpu_isa().and(crossbow_kernels::winograd_setting()) {
        say(format!("{who}: error: {e}"));
        return ExitCode::from(2);
    }
    match run(cli, &matches, &registry) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ SessionError::Interrupted { .. }) => {
            // Empty when the rank has said it already (see crossbow_session's `interrupted`).
            let line = e.to_string();
            if !line.is_empty() {
                say(format!("{who}: {line}"));
            }
            ExitCode::from(e.exit_code() as u8)
        }
        Err(e) => {
            say(format!("{who}: error: {}", shorten(&e.to_string())));
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// Reporting commands (`doctor`, `models`) end quietly when their reader goes away
/// (`crossbow doctor | head -3`), as Unix tools do, instead of panicking in `println!`: Rust
/// starts programs with SIGPIPE ignored, so a write to a closed pipe fails and `println!`
/// panics. Training commands keep it ignored: their checkpoints matter more than their output,
/// and their interrupt handling stays in charge.
fn die_quietly_on_broken_pipe() {
    #[cfg(unix)]
    // SAFETY: sets the disposition of one signal to its default; no handler is involved.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// `msg` with every run of more than 200 characters without a space cut to its first 100
/// and a count: a hostile value (a 1 MB string in a config file) is not echoed back whole;
/// and with its control characters escaped (a value with an escape sequence or a newline
/// neither drives the terminal nor splits the line).
fn shorten(msg: &str) -> String {
    const LONG: usize = 200;
    let msg: String = msg
        .trim_end()
        .chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect();
    let mut out = String::with_capacity(msg.len().min(4096));
    for (i, word) in msg.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let n = word.chars().count();
        if n > LONG {
            out.extend(word.chars().take(100));
            out.push_str(&format!("… ({} more characters)", n - 100));
        } else {
            out.push_str(word);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shorten;

    #[test]
    fn long_words_are_cut_in_messages() {
        assert_eq!(shorten("a b  c"), "a b  c");
        let long = "x".repeat(1_000_000);
        let s = shorten(&format!("unknown model '{long}' (known: lenet5)"));
        assert!(s.len() < 300 && s.contains("more characters") && s.ends_with("(known: lenet5)"), "{s}");
    }
}
