//! The stable learning rates of SMA's linearised update (`crossbow_sma::stability`), as a
//! table over learners, pulls and central momenta:
//!
//! ```sh
//! cargo run --release -p crossbow-sma --example stability             # the default table
//! cargo run --release -p crossbow-sma --example stability -- 0.9 4 0.1 0.9 local-momentum
//! #                                          learner momentum, k, alpha (or 1/k), central momentum, form
//! cargo run --release -p crossbow-sma --example stability -- 0.9 8 0.5 0.9 local-momentum mean
//! #                                          ... and the central step (sum, the default, or mean)
//! ```

use crossbow_sma::stability::Linearised;
use crossbow_sma::{AlphaRule, CentralStep, SmaForm};

fn line(form: SmaForm, k: usize, alpha: AlphaRule, step: CentralStep, mu: f64, muz: f64) -> String {
    let l = Linearised::new(form, k, alpha, step, mu, muz);
    let form = match step {
        CentralStep::Sum => form.name().to_string(),
        CentralStep::Mean => format!("{}, mean step", form.name()),
    };
    format!("| {form} | {k} | {alpha} | {muz} | {} |", l.describe())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    println!("| form | k | alpha | central momentum | stable set (learner momentum 0.9 unless given) |");
    println!("|---|---:|---|---:|---|");
    if args.len() == 5 || args.len() == 6 {
        let parsed = (
            args[0].parse::<f64>(),
            args[1].parse::<usize>(),
            AlphaRule::parse(&args[2]),
            args[3].parse::<f64>(),
            SmaForm::parse(&args[4]),
            CentralStep::parse(args.get(5).map_or("sum", String::as_str)),
        );
        match parsed {
            (Ok(mu), Ok(k), Ok(alpha), Ok(muz), Ok(form), Ok(step)) if k >= 1 => {
                println!("{}", line(form, k, alpha, step, mu, muz))
            }
            _ => {
                eprintln!(
                    "usage: stability [MOMENTUM K ALPHA CENTRAL_MOMENTUM FORM [STEP]], e.g. 0.9 4 0.1 0.9 local-momentum, \
                     or 0.9 8 0.5 0.9 local-momentum mean"
                );
                std::process::exit(2);
            }
        }
        return;
    }
    for form in [SmaForm::LocalMomentum, SmaForm::Paper] {
        for muz in [0.9, 0.0] {
            for alpha in [AlphaRule::OneOverK, AlphaRule::Fixed(0.1), AlphaRule::Fixed(0.05), AlphaRule::Fixed(0.025)] {
                for k in [2, 4, 8] {
                    println!("{}", line(form, k, alpha, CentralStep::Sum, 0.9, muz));
                }
            }
        }
    }
}
