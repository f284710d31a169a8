//! A whole training run in a program of your own: LeNet-5 on the built-in synthetic digits,
//! two learners kept consistent by SMA, through `crossbow-session` (`cargo run --release -p
//! crossbow-train-lenet`). Everything `crossbow train` takes is a field of [`TrainFile`].

use crossbow_session::{CliError, Session, Summary, TrainFile};

/// Trains LeNet-5 for `epochs` epochs of `images` built-in digits; every progress line goes
/// to `progress`.
fn train(epochs: f64, images: usize, progress: impl FnMut(&str) + Send + 'static) -> Result<Summary, CliError> {
    let settings = TrainFile {
        model: Some("lenet5".into()),
        epochs: Some(epochs),
        train_size: Some(images),
        learners_per_device: Some("2".into()),
        batch_size: Some(16),
        lr: Some(0.02),
        devices: Some("cpu".into()),
        ..TrainFile::default()
    };
    Session::new(settings)?.on_progress(progress).handle_signals(true).run()
}

fn main() -> Result<(), CliError> {
    let s = train(2.0, 20_000, |line| println!("{line}"))?;
    println!("{:.2}% after {} iterations ({:.1} s)", 100.0 * s.final_accuracy, s.iterations, s.train_seconds);
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_short_run_learns_the_digits() {
        let lines = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
        let sink = std::sync::Arc::clone(&lines);
        let s = super::train(2.0, 3000, move |l| sink.lock().unwrap().push(l.to_string())).unwrap();
        assert!(s.final_accuracy > 0.5, "{:.3}", s.final_accuracy);
        assert!(lines.lock().unwrap().iter().any(|l| l.contains("test acc")), "no progress line");
    }
}
