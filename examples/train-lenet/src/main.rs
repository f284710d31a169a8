//! A training run in a program of its own, on the typed API of `crossbow-session`: LeNet-5
//! on the built-in synthetic digits, two learners kept consistent by SMA, an evaluation of
//! the central model every 200 iterations, then the summary (`cargo run --release -p
//! crossbow-train-lenet`).

use crossbow_session::{Config, Learners, ModelKind, Schedule, SessionError, Trainer};

fn main() -> Result<(), SessionError> {
    let config = Config::new(ModelKind::LeNet5)
        .sizes(20_000, 2_000)
        .learners(Learners::Fixed(2))
        .sync("sma")
        .batch_size(16)
        .lr(0.02, Schedule::Constant)
        .epochs(2.0)
        .quiet(true)
        .handle_signals(true);
    let mut trainer = Trainer::new(config)?;
    while let Some(step) = trainer.step()? {
        if step.iteration % 200 == 0 {
            let eval = trainer.evaluate()?;
            println!("epoch {:.2}: test accuracy {:.2}%", step.epoch, 100.0 * eval.test_accuracy);
        }
    }
    trainer.finish()?; // quiet: the summary line only
    Ok(())
}
