//! same_tokens.rs: the Rust program of the cross-language check
//! (tests/bindings_same_tokens.sh): loads the model given as the first
//! argument, makes a tree and generates greedily (`Tree::generate`,
//! clade_generate) from three prompts (1..24; [30 31 32] and [40 41] under
//! it), 32 new tokens each with end-of-generation ignored, printing each
//! sequence's tokens on a line, separated by single spaces.
//!
//! usage: cargo run --offline --example same_tokens -- MODEL

use clade::{GenerateParams, Model, Prompt, Token, Tree, TreeParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: same_tokens MODEL")?;
    let model = Model::load(&path)?;
    let tree = Tree::new(&model, TreeParams::default())?;
    let p0: Vec<Token> = (1..=24).collect();
    let (p1, p2): (Vec<Token>, Vec<Token>) = (vec![30, 31, 32], vec![40, 41]);
    let prompts = [
        Prompt::new(&p0),
        Prompt::under(0, &p1),
        Prompt::under(0, &p2),
    ];
    let mut params = GenerateParams {
        max_new_tokens: 32,
        ignore_eog: true,
        ..GenerateParams::default()
    };
    params.sampler.temperature = 0.0;
    for g in tree.generate(&prompts, &params)? {
        let line: Vec<String> = g.tokens.iter().map(|t| t.to_string()).collect();
        println!("{}", line.join(" "));
    }
    Ok(())
}
