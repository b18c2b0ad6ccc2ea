//! Tests of the Rust bindings: `cargo test --offline` in bindings/rust.
//!
//! Environment:
//!   CLADE_TEST_MODEL  a GGUF model with a 300-token vocabulary to use as is
//!   CLADE_CLI         the clade tool used to write random models otherwise
//!                     (default: ../../build/tools/clade/clade)
//!   CLADE_VOCAB_DIR   reference vocabularies (default: ../../tests/data/vocab);
//!                     the tests that need them fail without them
//!   CLADE_LIB_DIR     where libclade.so is (build time; default ../../build)

use clade::{Cache, CacheParams, ErrorKind, KvType, LogLevel, Model, ModelParams, Sampler, SamplerParams, SeqId,
            Token, Tree, TreeParams, ROOT};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Cargo's scratch folder for integration tests, inside the target dir.
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("clade-rs-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fn cli() -> PathBuf {
    match std::env::var("CLADE_CLI") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => manifest().join("../../build/tools/clade/clade"),
    }
}

fn random_model(name: &str, extra: &[&str]) -> PathBuf {
    let path = tmp_dir().join(name);
    if !path.exists() {
        let st = Command::new(cli())
            .args(["model", "random", "-o"])
            .arg(&path)
            .args(["--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ff", "128",
                   "--type", "f32", "--seed", "7"])
            .args(extra)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} (set CLADE_CLI): {e}", cli().display()));
        assert!(st.status.success(), "clade model random failed: {}", String::from_utf8_lossy(&st.stderr));
    }
    path
}

fn small_model_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| match std::env::var("CLADE_TEST_MODEL") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => random_model("small.gguf", &["--vocab", "300"]),
    })
}

fn small_model() -> Model {
    Model::load_with(small_model_path(), &ModelParams { n_threads: 1, ..ModelParams::default() }).unwrap()
}

/// Rows of logits equal to about `rel`, relative to the row's scale.
fn assert_close(got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1f32, |m, x| m.max(x.abs()));
    let worst = got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst <= rel * scale, "logits differ by {worst} (scale {scale})");
}

fn f32_tree(m: &Model) -> Tree {
    Tree::new(m, TreeParams { kv_type: KvType::F32, ..TreeParams::default() }).unwrap()
}

fn cache(tree: &Tree, max_seqs: i32, max_tokens: i32) -> Cache {
    Cache::new(tree, CacheParams { max_seqs, max_tokens, ..CacheParams::default() }).unwrap()
}

fn one(c: &mut Cache, seq: SeqId, tokens: &[Token]) -> clade::Result<Vec<f32>> {
    c.decode(&[(seq, tokens)], false).map(|mut r| r.remove(0))
}

fn argmax(row: &[f32]) -> Token {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as Token
}

fn greedy(cache: &mut Cache, seq: clade::SeqId, first: Vec<f32>, n: usize) -> Vec<Token> {
    let mut out = Vec::new();
    let mut row = first;
    for _ in 0..n {
        out.push(argmax(&row));
        let last = [*out.last().unwrap()];
        row = cache.decode(&[(seq, &last[..])], false).unwrap().remove(0);
    }
    out
}

#[test]
fn version_and_info() {
    assert_eq!(clade::version(), clade::sys::CLADE_VERSION_STRING);
    let m = small_model();
    let i = m.info().unwrap();
    assert_eq!(i.architecture, "llama");
    assert_eq!((i.n_layers, i.n_embd, i.n_heads, i.n_kv_heads), (2, 64, 4, 2));
    assert_eq!((i.head_dim, i.n_ff, i.n_vocab), (16, 128, 300));
    assert_eq!(i.weight_type, clade::sys::CLADE_WEIGHT_F32);
    assert!(i.n_params > 0);
    assert_eq!(m.n_vocab(), 300);
}

#[test]
fn shared_prefix_equals_alone() {
    let m = small_model();
    let prompt: Vec<Token> = vec![5, 17, 42, 99, 3, 250, 11, 64, 7, 123];
    let suffixes: [&[Token]; 3] = [&[21], &[150, 9], &[299]];
    let n = 8;
    let tree = Tree::new(&m, TreeParams { kv_type: KvType::F32, ..TreeParams::default() }).unwrap();
    let (node, node_logits) = tree.append_logits(ROOT, &prompt).unwrap();
    assert_eq!(node_logits.len(), 300);
    let info = tree.node_info(node).unwrap();
    assert_eq!((info.parent, info.length, info.path_length), (Some(0), prompt.len() as i32, 0));
    assert_eq!(tree.node_tokens(node).unwrap(), prompt);

    let params = CacheParams { max_seqs: 4, max_tokens: 64, ..CacheParams::default() };
    let mut shared: Vec<Vec<Token>> = Vec::new();
    {
        let mut cache = Cache::new(&tree, params.clone()).unwrap();
        let seqs: Vec<_> = suffixes.iter().map(|s| cache.add(node, s, false).unwrap()).collect();
        let empty: Vec<(clade::SeqId, &[Token])> = seqs.iter().map(|&s| (s, &[][..])).collect();
        let rows = cache.decode(&empty, false).unwrap();
        assert_eq!(rows.len(), 3);
        for (s, suf) in seqs.iter().zip(&suffixes) {
            assert_eq!(cache.length(*s).unwrap(), suf.len() as i32);
        }
        shared.extend(rows.iter().map(|r| vec![argmax(r)]));
        for _ in 1..n {
            let last: Vec<[Token; 1]> = shared.iter().map(|o| [*o.last().unwrap()]).collect();
            let step: Vec<(clade::SeqId, &[Token])> =
                seqs.iter().zip(&last).map(|(&s, t)| (s, &t[..])).collect();
            let rows = cache.decode(&step, false).unwrap();
            for (o, r) in shared.iter_mut().zip(&rows) {
                o.push(argmax(r));
            }
        }
        assert!(cache.kv_bytes() > 0);
    }
    tree.release(node).unwrap();

    for (suf, want) in suffixes.iter().zip(&shared) {
        let mut cache = Cache::new(&tree, params.clone()).unwrap();
        let mut own = prompt.clone();
        own.extend_from_slice(suf);
        let s = cache.add(ROOT, &own, false).unwrap();
        let row = cache.decode(&[(s, &[][..])], false).unwrap().remove(0);
        assert_eq!(&greedy(&mut cache, s, row, n), want);
    }

    let mut cache = Cache::new(&tree, params).unwrap();
    let s = cache.add(ROOT, &prompt, false).unwrap();
    let row = cache.decode(&[(s, &[][..])], false).unwrap().remove(0);
    assert_eq!(argmax(&row), argmax(&node_logits));
    for (a, b) in row.iter().zip(&node_logits) {
        assert!((a - b).abs() <= 1e-3 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

// decode_greedy (clade 1.4): the same steps in two caches, one returning
// logits rows, the other only each row's argmax token.
#[test]
fn decode_greedy_matches_the_logits() {
    let m = small_model();
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let params = CacheParams { max_seqs: 2, max_tokens: 32, ..CacheParams::default() };
    let mut c1 = Cache::new(&tree, params.clone()).unwrap();
    let mut c2 = Cache::new(&tree, params).unwrap();
    let a1 = c1.add(ROOT, &[1, 2, 3], false).unwrap();
    let b1 = c1.add(ROOT, &[4], false).unwrap();
    let a2 = c2.add(ROOT, &[1, 2, 3], false).unwrap();
    let b2 = c2.add(ROOT, &[4], false).unwrap();
    for step in 0..3 {
        let t = [5 + step as Token];
        let all = step == 0;
        let rows = c1.decode(&[(a1, &t[..]), (b1, &[6][..])], all).unwrap();
        let got = c2.decode_greedy(&[(a2, &t[..]), (b2, &[6][..])], all).unwrap();
        assert_eq!(got.len(), if all { 6 } else { 2 });
        let want: Vec<Token> = rows.iter().map(|r| argmax(r)).collect();
        assert_eq!(got, want);
    }
}

#[test]
fn generate_and_sampler() {
    let m = small_model();
    let prompt: Vec<Token> = vec![1, 2, 3, 4, 5, 6];
    let out = clade::generate(&m, &prompt, 6, 3, 0.0, 0).unwrap();
    assert_eq!(out.len(), 3);
    assert!(out.iter().all(|o| o == &out[0] && o.len() == 6));
    let a = clade::generate(&m, &prompt, 6, 3, 1.0, 11).unwrap();
    let b = clade::generate(&m, &prompt, 6, 3, 1.0, 11).unwrap();
    assert_eq!(a, b);
    assert!(a.iter().flatten().all(|&t| (0..300).contains(&t)));

    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let mut cache = Cache::new(&tree, CacheParams::default()).unwrap();
    let s = cache.add(ROOT, &prompt, false).unwrap();
    let row = cache.decode(&[(s, &[][..])], false).unwrap().remove(0);
    let mut g = Sampler::greedy().unwrap();
    assert_eq!(g.sample(0, &row, &[]).unwrap(), argmax(&row));
    // a forgotten stream starts again from its first draw
    let mut r = Sampler::new(SamplerParams {
        temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 5, ..SamplerParams::default()
    })
    .unwrap();
    let first: Vec<Token> = (0..8).map(|_| r.sample(7, &row, &[]).unwrap()).collect();
    r.forget(7).unwrap();
    r.forget(12345).unwrap(); // never sampled: fine
    let again: Vec<Token> = (0..8).map(|_| r.sample(7, &row, &[]).unwrap()).collect();
    assert_eq!(first, again);
    assert_eq!(greedy(&mut cache, s, row, 6), out[0]);
}

#[test]
fn truncate_remove_cache_full() {
    let m = small_model();
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let mut cache = Cache::new(&tree, CacheParams { max_seqs: 1, max_tokens: 6, ..CacheParams::default() }).unwrap();
    let s = cache.add(ROOT, &[1, 2, 3], false).unwrap();
    cache.decode(&[(s, &[4, 5][..])], false).unwrap();
    assert_eq!(cache.length(s).unwrap(), 5);
    let e = cache.decode(&[(s, &[6, 7][..])], false).unwrap_err();
    assert_eq!(e.kind, ErrorKind::CacheFull);
    assert_eq!(e.status, clade::sys::CLADE_CACHE_FULL);
    assert_eq!(cache.length(s).unwrap(), 5);
    cache.truncate(s, 2).unwrap();
    assert_eq!(cache.decode(&[(s, &[7, 8][..])], true).unwrap().len(), 2);
    assert_eq!(cache.add(ROOT, &[], false).unwrap_err().kind, ErrorKind::CacheFull);
    cache.remove(s).unwrap();
    let e = cache.length(s).unwrap_err();
    assert_eq!(e.kind, ErrorKind::State);
    assert!(!e.message.is_empty());
}

#[test]
fn bad_token() {
    let m = small_model();
    let bad = m.n_vocab() as Token + 5;
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let e = tree.append(ROOT, &[1, bad]).unwrap_err();
    assert_eq!((e.kind, e.status), (ErrorKind::Token, clade::sys::CLADE_E_TOKEN));
    assert!(!e.message.is_empty());
    assert!(e.to_string().contains(&e.message));
    let mut cache = Cache::new(&tree, CacheParams::default()).unwrap();
    assert_eq!(cache.add(ROOT, &[bad], false).unwrap_err().kind, ErrorKind::Token);
    let s = cache.add(ROOT, &[1], false).unwrap();
    assert_eq!(cache.decode(&[(s, &[-1][..])], false).unwrap_err().kind, ErrorKind::Token);
    assert_eq!(cache.length(s).unwrap(), 0);
    assert_eq!(tree.release(ROOT).unwrap_err().kind, ErrorKind::State);
}

#[test]
fn bad_path() {
    let missing = tmp_dir().join("does-not-exist.gguf");
    let e = Model::load(&missing).unwrap_err();
    assert_eq!((e.kind, e.status), (ErrorKind::Io, clade::sys::CLADE_E_IO));
    assert!(e.message.contains("does-not-exist"), "{}", e.message);
    let junk = tmp_dir().join("junk.gguf");
    std::fs::write(&junk, b"this is not a gguf file at all, not at all").unwrap();
    assert_eq!(Model::load(&junk).unwrap_err().kind, ErrorKind::Format);
}

#[test]
fn chat_apply() {
    use clade::ChatMessage;
    assert!(clade::chat_templates().contains(&"llama3"));
    let m = small_model();
    let conv = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "Hello."),
        ChatMessage::new("user", "Bye"),
    ];
    assert_eq!(
        m.chat_apply(&conv, Some("llama3"), true).unwrap(),
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    assert_eq!(m.chat_apply(&conv[1..2], Some("gemma"), false).unwrap(), "<start_of_turn>user\nHi<end_of_turn>\n");
    // the random model has no template; unknown names are unsupported too
    assert_eq!(m.chat_apply(&conv, None, true).unwrap_err().kind, ErrorKind::Unsupported);
    assert_eq!(m.chat_template_name().unwrap_err().kind, ErrorKind::Unsupported);
    assert_eq!(m.chat_apply(&conv, Some("vicuna"), true).unwrap_err().kind, ErrorKind::Unsupported);
    let twice = [ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
    assert_eq!(m.chat_apply(&twice, Some("llama2"), true).unwrap_err().kind, ErrorKind::InvalidArg);
    let nul = [ChatMessage::new("user", "a\0b")];
    assert_eq!(m.chat_apply(&nul, Some("chatml"), true).unwrap_err().kind, ErrorKind::InvalidArg);
}

#[test]
fn tokenizer_round_trip() {
    let dir = match std::env::var("CLADE_VOCAB_DIR") {
        Ok(d) if !d.is_empty() => PathBuf::from(d),
        _ => manifest().join("../../tests/data/vocab"),
    };
    let vocab = dir.join("ggml-vocab-llama-spm.gguf");
    assert!(vocab.exists(), "no reference vocabulary at {} (set CLADE_VOCAB_DIR)", vocab.display());
    let path = random_model("spm.gguf", &["--vocab-from", vocab.to_str().unwrap()]);
    let m = Model::load_with(&path, &ModelParams { n_threads: 1, ..ModelParams::default() }).unwrap();
    let sp = m.special_tokens().unwrap();
    for text in ["Hello world", "héllo, wörld! 日本語 🙂", "  two  spaces\nand a line", "x = f(y) + 42;"] {
        let ids = m.tokenize(text, true, false).unwrap();
        if sp.add_bos {
            assert_eq!(Some(ids[0]), sp.bos);
        }
        assert_eq!(m.detokenize(&ids, false).unwrap(), text);
        let mut d = clade::Detokenizer::new(&m, false, true).unwrap();
        let mut bytes = Vec::new();
        for &t in &ids {
            bytes.extend(d.push(t).unwrap());
        }
        bytes.extend(d.flush().unwrap());
        assert_eq!(String::from_utf8(bytes).unwrap(), text);
    }
    assert_eq!(m.tokenize("", false, false).unwrap(), Vec::<Token>::new());
    let e = m.tokenize_bytes(b"ok \xff\xfe", true, false).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Utf8);
    // a detokenizer keeps its model alive
    let ids = m.tokenize("Hello world", false, false).unwrap();
    let mut d = clade::Detokenizer::new(&m, false, true).unwrap();
    drop(m);
    let mut bytes = Vec::new();
    for &t in &ids {
        bytes.extend(d.push(t).unwrap());
    }
    bytes.extend(d.flush().unwrap());
    assert_eq!(String::from_utf8(bytes).unwrap(), "Hello world");
}

#[test]
fn children() {
    let m = small_model();
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    assert!(tree.children(ROOT).unwrap().is_empty());
    let a = tree.append(ROOT, &[1, 2]).unwrap();
    let b = tree.append(ROOT, &[3]).unwrap();
    let c = tree.append(a, &[4]).unwrap();
    let many: Vec<_> = (0..12).map(|i| tree.append(b, &[i]).unwrap()).collect(); // past the first buffer
    assert_eq!(tree.children(ROOT).unwrap(), vec![a, b]);
    assert_eq!(tree.children(a).unwrap(), vec![c]);
    assert_eq!(tree.children(b).unwrap(), many);
    assert!(tree.children(c).unwrap().is_empty());
    for n in many {
        tree.release(n).unwrap();
    }
    tree.release(b).unwrap();
    assert_eq!(tree.children(ROOT).unwrap(), vec![a]);
    assert!(tree.children(b).is_err()); // released: not a live node
}

#[test]
fn fork() {
    let m = small_model();
    let tree = f32_tree(&m);
    let mut c = cache(&tree, 4, 64);
    let node = tree.append(ROOT, &[5, 6, 7, 8]).unwrap();
    let s = c.add(node, &[9, 10], false).unwrap();
    one(&mut c, s, &[11]).unwrap();
    let f = c.fork(s).unwrap();
    assert_ne!(f, s);
    assert_eq!(c.seq_node(f).unwrap(), node);
    assert_eq!(c.seq_tokens(f).unwrap(), vec![9, 10, 11]);
    assert_eq!(c.seq_tokens(s).unwrap(), vec![9, 10, 11]);
    let rows = c.decode(&[(s, &[12][..]), (f, &[12][..])], false).unwrap();
    assert_close(&rows[0], &rows[1], 1e-4);
    // a fork copies the queued tokens too
    let q = c.add(node, &[13, 14], false).unwrap();
    let g = c.fork(q).unwrap();
    let rows = c.decode(&[(q, &[][..]), (g, &[][..])], false).unwrap();
    assert_eq!(rows.len(), 2);
    assert_close(&rows[0], &rows[1], 1e-4);
    assert_eq!(c.seq_tokens(g).unwrap(), vec![13, 14]);
    tree.release(node).unwrap();
    let mut full = cache(&tree, 1, 16);
    let t = full.add(ROOT, &[], false).unwrap();
    assert_eq!(full.fork(t).unwrap_err().kind, ErrorKind::CacheFull);
}

#[test]
fn decode_tree_and_keep() {
    let m = small_model();
    let tree = f32_tree(&m);
    let mut c = cache(&tree, 3, 64);
    let node = tree.append(ROOT, &[5, 6, 7, 8]).unwrap();
    let s = c.add(node, &[9, 10], false).unwrap();
    c.decode(&[(s, &[][..])], false).unwrap();
    let (a, b) = (c.fork(s).unwrap(), c.fork(s).unwrap());
    // 21 and 30 after the history, 31 under 30, 22 under 21
    let rows = c.decode_tree(&[(s, &[21, 30, 31, 22][..], &[-1, -1, 1, 0][..])], true).unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(c.length(s).unwrap(), 6);
    // each branch as the chain decoded alone (b: a chain's parents)
    let ra = c.decode(&[(a, &[30, 31][..])], true).unwrap();
    let rb = c.decode_tree(&[(b, &[21, 22][..], &[-1, 0][..])], true).unwrap();
    for (got, want) in rows.iter().zip([&rb[0], &ra[0], &ra[1], &rb[1]]) {
        assert_close(got, want, 1e-4);
    }
    // keep the path 30, 31: as if only it was decoded
    c.keep(s, 2, &[1, 2]).unwrap();
    assert_eq!(c.length(s).unwrap(), 4);
    assert_eq!(c.seq_tokens(s).unwrap(), c.seq_tokens(a).unwrap());
    let rows = c.decode(&[(s, &[40][..]), (a, &[40][..])], false).unwrap();
    assert_close(&rows[0], &rows[1], 1e-4);
    // bad parents (or as many as the tokens) and a bad keep: InvalidArg, nothing changed
    for parents in [&[0, -1][..], &[-1, 5][..], &[-1][..]] {
        let e = c.decode_tree(&[(s, &[1, 2][..], parents)], false).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArg, "{parents:?}: {e}");
    }
    assert_eq!(c.keep(s, 2, &[1, 0]).unwrap_err().kind, ErrorKind::InvalidArg);
    assert_eq!(c.length(s).unwrap(), 5);
    tree.release(node).unwrap();
}

#[test]
fn promote_and_move() {
    let m = small_model();
    let prompt: Vec<Token> = vec![5, 17, 42, 99];
    let tree = f32_tree(&m);
    let mut c = cache(&tree, 6, 64);
    let node = tree.append(ROOT, &prompt).unwrap();
    let a = c.add(node, &[21, 22], false).unwrap();
    one(&mut c, a, &[23]).unwrap();
    let b = c.fork(a).unwrap(); // B shares A's unique tokens, then goes on
    one(&mut c, b, &[31, 32]).unwrap();
    assert_eq!(c.length(b).unwrap(), 5);
    let probe = c.fork(b).unwrap(); // B's next logits before the move
    let want = one(&mut c, probe, &[40]).unwrap();

    let unique = c.seq_tokens(a).unwrap();
    assert_eq!(unique, vec![21, 22, 23]);
    let p = c.promote(a).unwrap();
    assert!(tree.children(node).unwrap().contains(&p));
    assert_eq!(tree.node_tokens(p).unwrap(), unique);
    let info = tree.node_info(p).unwrap();
    assert_eq!((info.parent, info.length, info.path_length), (Some(node), 3, prompt.len() as i32));
    assert_eq!(c.seq_node(a).unwrap(), p);
    assert_eq!(c.length(a).unwrap(), 0);
    assert!(c.seq_tokens(a).unwrap().is_empty());
    // a second sequence under the new node decodes as the promoted one
    let d = c.add(p, &[], false).unwrap();
    let rows = c.decode(&[(a, &[50][..]), (d, &[50][..])], false).unwrap();
    assert_close(&rows[0], &rows[1], 1e-4);

    // move B under the new node: its logits stay, its unique part shrinks
    c.move_to(b, p).unwrap();
    assert_eq!(c.seq_node(b).unwrap(), p);
    assert_eq!(c.length(b).unwrap(), 2);
    assert_eq!(c.seq_tokens(b).unwrap(), vec![31, 32]);
    let got = one(&mut c, b, &[40]).unwrap();
    assert_close(&got, &want, 1e-4);
    // a node that is not a prefix of the history
    let other = tree.append(ROOT, &[1, 2, 3]).unwrap();
    assert_eq!(c.move_to(b, other).unwrap_err().kind, ErrorKind::State);
    for n in [other, p, node] {
        tree.release(n).unwrap();
    }
}

#[test]
fn kv_budget() {
    let m = small_model();
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let mut c = cache(&tree, 2, 64);
    let s = c.add(ROOT, &[], false).unwrap();
    let used = tree.kv_used();
    tree.set_kv_budget(used.max(1)).unwrap();
    let e = tree.append(ROOT, &[1, 2, 3]).unwrap_err();
    assert_eq!((e.kind, e.status), (ErrorKind::KvBudget, clade::sys::CLADE_KV_BUDGET));
    assert!(tree.children(ROOT).unwrap().is_empty());
    let long: Vec<Token> = (1..41).collect();
    assert_eq!(one(&mut c, s, &long).unwrap_err().kind, ErrorKind::KvBudget);
    assert_eq!(c.length(s).unwrap(), 0);
    assert_eq!(tree.kv_used(), used);
    tree.set_kv_budget(0).unwrap(); // no limit: the same calls succeed
    let node = tree.append(ROOT, &[1, 2, 3]).unwrap();
    one(&mut c, s, &long).unwrap();
    assert!(tree.kv_used() > used);
    tree.release(node).unwrap();
    // the budget as a tree parameter
    let tight = Tree::new(&m, TreeParams { kv_budget: 1, ..TreeParams::default() }).unwrap();
    assert_eq!(tight.append(ROOT, &[1, 2, 3]).unwrap_err().kind, ErrorKind::KvBudget);
}

#[test]
fn abort() {
    let m = small_model();
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let mut c = cache(&tree, 2, 64);
    let s = c.add(ROOT, &[1, 2, 3], false).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let k = calls.clone();
    tree.set_abort(Some(Box::new(move || {
        k.fetch_add(1, Ordering::SeqCst);
        true
    })))
    .unwrap();
    let e = one(&mut c, s, &[4]).unwrap_err();
    assert_eq!((e.kind, e.status), (ErrorKind::Stopped, clade::sys::CLADE_STOPPED));
    assert!(calls.load(Ordering::SeqCst) > 0);
    assert_eq!(c.length(s).unwrap(), 0); // nothing changed, tokens still queued
    assert_eq!(tree.append(ROOT, &[5, 6]).unwrap_err().kind, ErrorKind::Stopped);
    assert!(tree.children(ROOT).unwrap().is_empty());

    // a panic in the callback stops the call and comes back out of it
    tree.set_abort(Some(Box::new(|| panic!("from the abort callback")))).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one(&mut c, s, &[4])));
    let msg = r.unwrap_err();
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"from the abort callback"));
    assert_eq!(c.length(s).unwrap(), 0);

    let k = calls.clone();
    let n = calls.load(Ordering::SeqCst);
    tree.set_abort(Some(Box::new(move || {
        k.fetch_add(1, Ordering::SeqCst);
        false
    })))
    .unwrap();
    one(&mut c, s, &[4]).unwrap();
    assert!(calls.load(Ordering::SeqCst) > n);
    tree.set_abort(None).unwrap();
    assert_eq!(c.length(s).unwrap(), 4);
    one(&mut c, s, &[5]).unwrap();

    // the callback stays in effect for a cache that outlives its tree
    tree.set_abort(Some(Box::new(|| true))).unwrap();
    drop(tree);
    assert_eq!(one(&mut c, s, &[6]).unwrap_err().kind, ErrorKind::Stopped);
}

#[test]
fn log() {
    let got: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
    let sink = got.clone();
    clade::set_log(Some(Box::new(move |level, msg| sink.lock().unwrap().push((level, msg.to_owned())))),
                   LogLevel::Info);
    let m = small_model();
    clade::set_log(None, LogLevel::Info);
    drop(m);
    let got = got.lock().unwrap();
    // other tests may load models meanwhile; this one's load logged at least
    assert!(got.iter().any(|(_, msg)| !msg.is_empty()), "no log message for a model load");
    assert!(got.iter().all(|(level, _)| *level >= LogLevel::Info));
}

#[test]
fn model_dropped_first() {
    let m = small_model();
    let tree = f32_tree(&m);
    let mut c = cache(&tree, 2, 32);
    let s = c.add(ROOT, &[1, 2, 3], false).unwrap();
    let want = one(&mut c, s, &[4]).unwrap();
    c.truncate(s, 3).unwrap();
    drop(m); // the tree and cache keep the model's memory alive
    let node = tree.append(ROOT, &[7, 8]).unwrap();
    assert_close(&one(&mut c, s, &[4]).unwrap(), &want, 1e-4);
    drop(tree); // the cache keeps the tree's nodes alive
    let s2 = c.add(node, &[9], false).unwrap();
    assert_eq!(c.decode(&[(s, &[5][..]), (s2, &[][..])], false).unwrap().len(), 2);
    drop(c);

    // handles spread over threads, dropped in any order
    let m = small_model();
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let mut c = cache(&tree, 1, 16);
    drop(m);
    let t = std::thread::spawn(move || {
        let s = c.add(ROOT, &[1], false).unwrap();
        one(&mut c, s, &[2]).unwrap();
        c
    });
    tree.append(ROOT, &[3]).unwrap();
    let c = t.join().unwrap();
    drop(tree);
    drop(c);
}

// ---- batch append --------------------------------------------------------------------

/// Every live node below the root, found through children listings.
fn all_nodes(tree: &Tree) -> Vec<clade::NodeId> {
    let (mut out, mut todo) = (Vec::new(), vec![ROOT]);
    while let Some(n) = todo.pop() {
        let kids = tree.children(n).unwrap();
        out.extend_from_slice(&kids);
        todo.extend_from_slice(&kids);
    }
    out.sort();
    out
}

// A at the root; B and C under A (item 0); two sequences of a cache under B
// (item 1); every item with logits.
const BATCH_A: [Token; 7] = [5, 17, 42, 99, 3, 250, 11];
const BATCH_B: [Token; 3] = [64, 7, 123];
const BATCH_C: [Token; 2] = [8, 1];
const BATCH_S0: [Token; 3] = [21, 150, 9];
const BATCH_S1: [Token; 1] = [299];

#[test]
fn append_batch() {
    use clade::{AppendItem, Parent};
    let m = small_model();
    let tree = f32_tree(&m);
    let mut c = cache(&tree, 4, 64);
    let got = tree
        .append_batch(&[
            AppendItem::node(ROOT, &BATCH_A).with_logits(),
            AppendItem::node(Parent::Item(0), &BATCH_B).with_logits(),
            AppendItem::node(Parent::Item(0), &BATCH_C).logits(true),
            AppendItem::seq(&c, Parent::Item(1), &BATCH_S0).with_logits(),
            AppendItem::seq(&c, Parent::Item(1), &BATCH_S1).with_logits(),
        ])
        .unwrap();
    assert_eq!(got.len(), 5);
    let nodes: Vec<_> = got[..3].iter().map(|r| r.node.expect("a node item gives a node")).collect();
    let (na, nb, nc) = (nodes[0], nodes[1], nodes[2]);
    assert!(got[..3].iter().all(|r| r.seq.is_none()));
    assert!(na > 0 && nb > 0 && nc > 0 && na != nb && nb != nc && na != nc);
    for (n, toks, parent, path) in [(na, &BATCH_A[..], ROOT, 0), (nb, &BATCH_B[..], na, 7), (nc, &BATCH_C[..], na, 7)] {
        assert_eq!(tree.node_tokens(n).unwrap(), toks);
        let i = tree.node_info(n).unwrap();
        assert_eq!((i.parent, i.length, i.path_length), (Some(parent), toks.len() as i32, path));
    }
    assert_eq!(tree.children(na).unwrap(), vec![nb, nc]);
    let mut sorted = nodes.clone();
    sorted.sort();
    assert_eq!(all_nodes(&tree), sorted);
    let (s0, s1) = (got[3].seq.unwrap(), got[4].seq.unwrap());
    assert!(got[3..].iter().all(|r| r.node.is_none()));
    assert_ne!(s0, s1);
    for (s, toks) in [(s0, &BATCH_S0[..]), (s1, &BATCH_S1[..])] {
        assert_eq!(c.seq_node(s).unwrap(), nb);
        assert_eq!(c.seq_tokens(s).unwrap(), toks); // evaluated, not queued
        assert_eq!(c.length(s).unwrap(), toks.len() as i32);
    }
    assert!(got.iter().all(|r| r.logits.as_ref().map(|l| l.len()) == Some(300)));

    // the same, one item at a time with the single-item calls
    let t1 = f32_tree(&m);
    let mut c1 = cache(&t1, 4, 64);
    let (a, la) = t1.append_logits(ROOT, &BATCH_A).unwrap();
    let (b, lb) = t1.append_logits(a, &BATCH_B).unwrap();
    let (_, lc) = t1.append_logits(a, &BATCH_C).unwrap();
    let mut want = vec![la, lb, lc];
    let mut seqs1 = Vec::new();
    for toks in [&BATCH_S0[..], &BATCH_S1[..]] {
        let q = c1.add(b, toks, false).unwrap();
        want.push(one(&mut c1, q, &[]).unwrap());
        seqs1.push(q);
    }
    for (r, w) in got.iter().zip(&want) {
        assert_close(r.logits.as_ref().unwrap(), w, 1e-4);
    }
    // the batch's sequences go on as the one-at-a-time ones (a decode with
    // no new tokens gives no row: nothing is queued)
    let x = c.decode(&[(s0, &[33][..]), (s1, &[44][..])], false).unwrap();
    let y = c1.decode(&[(seqs1[0], &[33][..]), (seqs1[1], &[44][..])], false).unwrap();
    assert_eq!(x.len(), 2);
    for (r, w) in x.iter().zip(&y) {
        assert_close(r, w, 1e-4);
    }
    for n in nodes {
        tree.release(n).unwrap();
    }
}

#[test]
fn append_batch_atomic() {
    use clade::{AppendItem, Parent};
    let m = small_model();
    let tree = f32_tree(&m);
    let mut c = cache(&tree, 4, 64);
    let keep = tree.append(ROOT, &[1, 2, 3]).unwrap();
    let (before, used) = (all_nodes(&tree), tree.kv_used());
    let bad = m.n_vocab() as Token;
    let bad_seq = [4, bad];
    let bad_node = [bad];
    let lasts = [
        AppendItem::seq(&c, Parent::Item(1), &bad_seq).with_logits(),
        AppendItem::node(Parent::Item(0), &bad_node),
    ];
    for last in lasts {
        let e = tree
            .append_batch(&[
                AppendItem::node(keep, &BATCH_A).with_logits(),
                AppendItem::node(Parent::Item(0), &BATCH_B),
                AppendItem::seq(&c, Parent::Item(1), &[7, 8]).with_logits(),
                last,
            ])
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Token, "{e}");
        assert!(!e.message.is_empty());
        assert_eq!(all_nodes(&tree), before, "nothing added");
        assert_eq!(tree.kv_used(), used);
        assert_eq!(tree.node_info(keep).unwrap().n_children, 0);
    }
    // parents that are no earlier node item
    for items in [
        vec![AppendItem::node(Parent::Item(0), &[1])],
        vec![AppendItem::node(keep, &[1]), AppendItem::node(Parent::Item(5), &[2])],
        vec![AppendItem::seq(&c, keep, &[1]), AppendItem::node(Parent::Item(0), &[2])],
        vec![AppendItem::node(Parent::Item(usize::MAX), &[2])],
    ] {
        assert!(tree.append_batch(&items).is_err(), "{items:?}");
        assert_eq!(all_nodes(&tree), before);
    }
    // a cache of another tree
    let other = f32_tree(&m);
    let foreign = cache(&other, 2, 16);
    let e = tree.append_batch(&[AppendItem::seq(&foreign, keep, &[1])]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArg);
    assert_eq!(foreign.kv_bytes(), 0);
    // the failed calls added no sequence: all four slots are free
    let four: Vec<_> = (0..4).map(|_| AppendItem::seq(&c, keep, &[9])).collect();
    let got = tree.append_batch(&four).unwrap();
    let mut seqs: Vec<_> = got.iter().map(|r| r.seq.unwrap()).collect();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), 4);
    assert_eq!(c.add(keep, &[1], false).unwrap_err().kind, ErrorKind::CacheFull);
    let e = tree.append_batch(&[AppendItem::node(keep, &[1]), AppendItem::seq(&c, Parent::Item(0), &[2])]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::CacheFull);
    assert_eq!(all_nodes(&tree), before);
    tree.release(keep).unwrap();
}

#[test]
fn append_batch_empty() {
    use clade::{AppendItem, Parent};
    let m = small_model();
    // the repr(C) struct has the library's layout size, and its defaults
    let mut it = std::mem::MaybeUninit::<clade::sys::clade_append_item>::zeroed();
    let it = unsafe {
        clade::sys::clade_append_item_init(it.as_mut_ptr());
        it.assume_init()
    };
    assert_eq!(it.size, std::mem::size_of::<clade::sys::clade_append_item>());
    assert_eq!((it.parent, it.n_tokens, it.node, it.seq), (0, 0, -1, -1));
    assert_eq!(clade::sys::CLADE_ITEM_NODE(3), -5);
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    assert!(tree.append_batch(&[]).unwrap().is_empty());
    assert!(all_nodes(&tree).is_empty());
    // items without logits, an empty node item among them
    let got = tree.append_batch(&[AppendItem::node(ROOT, &[]), AppendItem::node(Parent::Item(0), &[1, 2])]).unwrap();
    assert!(got.iter().all(|r| r.logits.is_none() && r.seq.is_none()));
    let (n0, n1) = (got[0].node.unwrap(), got[1].node.unwrap());
    assert_eq!(tree.node_info(n1).unwrap().parent, Some(n0));
    assert_eq!(tree.node_info(n0).unwrap().length, 0);
}

#[test]
fn sampler_penalties_bias_logprobs_batch() {
    let ninf = f32::NEG_INFINITY;
    let row = [1.0f32, 3.0, -2.0, 3.0, 0.5, 2.0, ninf, 2.5];
    // logit bias: token 2 lifted, token 1 banned; greedy
    let mut b = Sampler::new(SamplerParams {
        temperature: 0.0, logit_bias: vec![(2, 10.0), (1, ninf)], ..SamplerParams::default()
    })
    .unwrap();
    assert_eq!(b.sample(0, &row, &[]).unwrap(), 2);
    // frequency penalty over the history past a 1-token prompt: 3 loses 2
    let mut f = Sampler::new(SamplerParams {
        temperature: 0.0, frequency_penalty: 1.0, penalize_prompt: false, ..SamplerParams::default()
    })
    .unwrap();
    assert_eq!(f.sample_ex(0, &row, &[1, 3, 3], 1, 0).unwrap().token, 1);
    // log-probabilities against a direct log-softmax, no truncation
    let fin: Vec<f64> = row.iter().filter(|v| v.is_finite()).map(|&v| v as f64).collect();
    let mx = fin.iter().cloned().fold(f64::MIN, f64::max);
    let lse = mx + fin.iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
    let mut s = Sampler::new(SamplerParams {
        temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 3, ..SamplerParams::default()
    })
    .unwrap();
    let r = s.sample_ex(0, &row, &[], 0, 3).unwrap();
    assert!((r.logprob as f64 - (row[r.token as usize] as f64 - lse)).abs() < 1e-5);
    assert_eq!(r.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3, 7]);
    // a batch equals the same rows one by one
    let params = SamplerParams { temperature: 1.0, seed: 8, presence_penalty: 0.5, ..SamplerParams::default() };
    let mut a = Sampler::new(params.clone()).unwrap();
    let mut o = Sampler::new(params).unwrap();
    let mut rows = row.to_vec();
    rows.extend(row.iter().rev());
    let streams = [4u64, 9];
    let hist: [&[i32]; 2] = [&[0, 1], &[]];
    for _ in 0..5 {
        let got = a.sample_batch(&rows, row.len(), &streams, &hist, &[], 2).unwrap();
        for i in 0..2 {
            let want = o.sample_ex(streams[i], &rows[i * row.len()..(i + 1) * row.len()], hist[i], 0, 2).unwrap();
            assert_eq!(got[i], want);
        }
    }
    assert!(Sampler::new(SamplerParams { logit_bias: vec![(-1, 1.0)], ..SamplerParams::default() }).is_err());
}

// ---- generate (clade_generate) -------------------------------------------------------------

/// A random model with the reference SPM tokenizer (stop strings need
/// text), made once; None without the vocabulary.
fn spm_model() -> Option<Model> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    let path = PATH.get_or_init(|| {
        let dir = match std::env::var("CLADE_VOCAB_DIR") {
            Ok(d) if !d.is_empty() => PathBuf::from(d),
            _ => manifest().join("../../tests/data/vocab"),
        };
        let vocab = dir.join("ggml-vocab-llama-spm.gguf");
        assert!(vocab.exists(), "no reference vocabulary at {} (set CLADE_VOCAB_DIR)", vocab.display());
        Some(random_model("spm-generate.gguf", &["--vocab-from", vocab.to_str().unwrap()]))
    });
    path.as_ref().map(|p| Model::load_with(p, &ModelParams { n_threads: 1, ..ModelParams::default() }).unwrap())
}

/// Two prompts, the second under the first (one leaf); greedy, 2 samples,
/// 5 new tokens.
fn gen_setup(m: &Model) -> (Vec<Token>, Vec<Token>, clade::GenerateParams) {
    let a = m.tokenize("Once upon a time", true, false).unwrap();
    let b = m.tokenize(" there was", false, false).unwrap();
    let mut p = clade::GenerateParams::default();
    p.max_new_tokens = 5;
    p.n_samples = 2;
    p.sampler.temperature = 0.0;
    (a, b, p)
}

#[test]
fn generate_tree_greedy_matches_steps() {
    use clade::{FinishReason, Prompt};
    let Some(m) = spm_model() else { return };
    let (a, b, params) = gen_setup(&m);
    let prompts = [Prompt::new(&a), Prompt::under(0, &b)];
    let tree = f32_tree(&m);
    let res = tree.generate(&prompts, &params).unwrap();
    assert_eq!(res, tree.generate(&prompts, &params).unwrap()); // deterministic
    // by hand: the prompt nodes, then greedy decode steps
    let na = tree.append(ROOT, &a).unwrap();
    let (nb, mut row) = tree.append_logits(na, &b).unwrap();
    let mut c = Cache::new(&tree, CacheParams { kv_type: Some(KvType::F32), ..CacheParams::default() }).unwrap();
    let s = c.add(nb, &[], false).unwrap();
    let mut want = Vec::new();
    while want.len() < 5 {
        let t = argmax(&row);
        if m.is_eog(t) {
            break;
        }
        want.push(t);
        row = one(&mut c, s, &[t]).unwrap();
    }
    drop(c);
    tree.release(nb).unwrap();
    tree.release(na).unwrap();
    assert_eq!(tree.children(ROOT).unwrap(), Vec::<clade::NodeId>::new()); // generate left no node
    assert_eq!(res.len(), 2);
    for g in &res {
        assert_eq!(g.tokens, want);
        assert_eq!(g.prompt, 1);
        assert_eq!(g.finish, if want.len() == 5 { FinishReason::Length } else { FinishReason::StopToken });
        assert_eq!(g.logprobs, None);
    }
}

#[test]
fn generate_stop_string_and_stream() {
    use clade::{FinishReason, Flow, Prompt};
    let Some(m) = spm_model() else { return };
    let (a, b, mut params) = gen_setup(&m);
    let prompts = [Prompt::new(&a), Prompt::under(0, &b)];
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let full = tree.generate(&prompts, &params).unwrap().remove(0);
    let chars: Vec<char> = full.text.chars().collect();
    assert!(chars.len() >= 4, "{full:?}");
    let stop: String = chars[2..4].iter().collect();
    params.stop_strings = vec!["\u{1}never".into(), stop.clone()];
    let cut = tree.generate(&prompts, &params).unwrap();
    for g in &cut {
        assert_eq!(g.text, full.text[..full.text.find(&stop).unwrap()]);
        assert_eq!(g.finish, FinishReason::StopString);
        assert_eq!(g.tokens[..], full.tokens[..g.tokens.len()]);
    }
    // streaming: the pieces make the text; one final call per sequence
    params.stop_strings.clear();
    params.max_new_tokens = 8;
    params.sampler = SamplerParams { temperature: 0.9, seed: 3, ..SamplerParams::default() };
    params.logprobs = true;
    let plain = tree.generate(&prompts, &params).unwrap();
    let mut texts = vec![String::new(); 2];
    let mut finals = vec![0; 2];
    let streamed = tree
        .generate_stream(&prompts, &params, |seq, tok, piece| {
            texts[seq].push_str(piece);
            if tok.is_none() {
                finals[seq] += 1;
            }
            Flow::Continue
        })
        .unwrap();
    assert_eq!(streamed, plain);
    assert_eq!(finals, vec![1, 1]);
    for (g, t) in plain.iter().zip(&texts) {
        assert_eq!(&g.text, t);
        let lp = g.logprobs.as_ref().unwrap();
        assert_eq!(lp.len(), g.tokens.len());
        assert!(lp.iter().all(|&x| x <= 0.0));
    }
}

#[test]
fn generate_callback_stops_and_errors() {
    use clade::{FinishReason, Flow, Prompt};
    let Some(m) = spm_model() else { return };
    let (a, b, mut params) = gen_setup(&m);
    params.ignore_eog = true;
    let prompts = [Prompt::new(&a), Prompt::under(0, &b)];
    let tree = Tree::new(&m, TreeParams::default()).unwrap();
    let res = tree
        .generate_stream(&prompts, &params, |seq, _, _| if seq == 1 { Flow::StopSeq } else { Flow::Continue })
        .unwrap();
    assert_eq!(res[1].finish, FinishReason::Callback);
    assert_eq!(res[1].tokens.len(), 1);
    assert_eq!((res[0].finish, res[0].tokens.len()), (FinishReason::Length, 5));
    assert_eq!(res[1].tokens[..], res[0].tokens[..1]);
    let res = tree.generate_stream(&prompts, &params, |_, _, _| Flow::StopAll).unwrap();
    assert!(res.iter().all(|g| g.finish == FinishReason::Callback));
    // a panic stops the call, is resumed after it, and leaves the tree usable
    let mut calls = 0;
    let mut long = params.clone();
    long.max_new_tokens = 50;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tree.generate_stream(&prompts, &long, |_, _, _| {
            calls += 1;
            if calls == 2 {
                panic!("boom");
            }
            Flow::Continue
        })
    }));
    assert_eq!(*caught.unwrap_err().downcast::<&str>().unwrap(), "boom");
    assert!(calls < 20, "{calls} calls after the panic");
    assert_eq!(tree.children(ROOT).unwrap(), Vec::<clade::NodeId>::new());
    assert_eq!(tree.generate(&prompts, &params).unwrap().len(), 2);
    // errors are errors
    let nv = m.n_vocab() as Token;
    let bad = [1, nv + 3];
    let e = tree.generate(&[Prompt::new(&bad)], &params).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Token);
    let e = tree.generate(&[Prompt::new(&a), Prompt::under(0, &[])], &params).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArg); // an empty leaf
    let e = tree.generate(&[Prompt::new(&a), Prompt::under(1, &b)], &params).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArg); // not an earlier prompt
    let e = tree.generate(&prompts, &clade::GenerateParams { max_new_tokens: 0, ..params.clone() }).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArg);
    let small = small_model();
    let t2 = Tree::new(&small, TreeParams::default()).unwrap();
    let e = t2
        .generate(&[Prompt::new(&[1, 2])], &clade::GenerateParams { stop_strings: vec!["x".into()], ..params })
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported); // no tokenizer: no stop strings
}

// ---- speculative decoding (clade_generate_speculative) --------------------------------------

/// Prompts with two leaves and greedy parameters, on the 300-token model
/// (its greedy output soon repeats itself, so prompt lookup drafts).
fn spec_setup() -> (Vec<Vec<Token>>, clade::GenerateParams) {
    let mut p = clade::GenerateParams::default();
    p.max_new_tokens = 40;
    p.n_samples = 2;
    p.ignore_eog = true;
    p.sampler.temperature = 0.0;
    (vec![vec![1, 5, 9, 5, 9, 5], vec![7, 8, 9]], p)
}

fn assert_same(want: &[clade::Generation], got: &[clade::Generation], stats: &clade::GenerationStats) {
    assert_eq!(got, want);
    assert_eq!(stats.tokens, got.iter().map(|g| g.tokens.len() as u64).sum::<u64>());
    assert!(stats.accepted <= stats.drafted, "{stats:?}");
    assert!(stats.spec_steps <= stats.steps, "{stats:?}");
}

#[test]
fn speculative_lookup_and_draft_model_equal_greedy() {
    use clade::{Prompt, Speculative};
    let m = small_model();
    let (pr, params) = spec_setup();
    let prompts: Vec<Prompt> = pr.iter().map(|p| Prompt::new(p)).collect();
    let tree = f32_tree(&m);
    let want = tree.generate(&prompts, &params).unwrap();
    for adaptive in [true, false] {
        let mut spec = Speculative::lookup(3).max_draft(4).adaptive(adaptive);
        let (got, stats) = tree.generate_speculative(&prompts, &params, &mut spec).unwrap();
        assert_same(&want, &got, &stats);
        assert_eq!(stats.draft_steps, 0);
        if !adaptive {
            assert!(stats.accepted > 0, "{stats:?}");
            assert!(stats.steps < stats.tokens / 2, "{stats:?}");
        }
    }
    // another random model of the same vocabulary as the draft model
    let draft = Model::load_with(random_model("small-draft.gguf", &["--vocab", "300", "--layers", "1", "--seed", "11"]),
                                 &ModelParams { n_threads: 1, ..ModelParams::default() })
        .unwrap();
    let mut spec = Speculative::draft_model(&draft).max_draft(3).adaptive(false);
    let (got, stats) = tree.generate_speculative(&prompts, &params, &mut spec).unwrap();
    assert_same(&want, &got, &stats);
    assert!(stats.draft_steps > 0 && stats.drafted > 0, "{stats:?}");
    // the target as its own draft model: every draft token is accepted
    let mut spec = Speculative::draft_model(&m).adaptive(false);
    let (got, stats) = tree.generate_speculative(&prompts, &params, &mut spec).unwrap();
    assert_same(&want, &got, &stats);
    assert_eq!(stats.accepted, stats.drafted);
    assert!(stats.steps < stats.tokens, "{stats:?}");
    // streaming: the same tokens, one final call per sequence
    let mut finals = vec![0; 4];
    let (got, _) = tree
        .generate_speculative_stream(&prompts, &params, &mut Speculative::lookup(2), |seq, tok, _| {
            if tok.is_none() {
                finals[seq] += 1;
            }
            clade::Flow::Continue
        })
        .unwrap();
    assert_eq!(got, want);
    assert_eq!(finals, vec![1; 4]);
    assert_eq!(tree.children(ROOT).unwrap(), Vec::<clade::NodeId>::new());
}

#[test]
fn speculative_closure_drafter() {
    use clade::{Prompt, Speculative};
    let m = small_model();
    let (pr, params) = spec_setup();
    let prompts: Vec<Prompt> = pr.iter().map(|p| Prompt::new(p)).collect();
    let tree = f32_tree(&m);
    let want = tree.generate(&prompts, &params).unwrap();
    // a fixed guess: (almost) never accepted, the output is the same
    let mut calls = Vec::new();
    let mut spec = Speculative::drafter(|seq, history: &[Token], max| {
        calls.push((seq, history.len(), max));
        vec![3, 4, 5, 6].into_iter().take(max).collect()
    })
    .max_draft(4)
    .adaptive(false);
    let (got, stats) = tree.generate_speculative(&prompts, &params, &mut spec).unwrap();
    drop(spec);
    assert_same(&want, &got, &stats);
    assert_eq!(stats.draft_steps, 0);
    let mut seqs: Vec<u64> = calls.iter().map(|c| c.0).collect();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs, vec![0, 1, 2, 3]);
    assert!(calls.iter().all(|c| c.2 >= 1 && c.2 <= 4));
    // an oracle: the plain output's continuation; all accepted
    let lens: Vec<usize> = (0..4).map(|s| pr[s / 2].len()).collect();
    let mut spec = Speculative::drafter(|seq, history: &[Token], max| {
        let s = seq as usize;
        assert_eq!(history[..lens[s]], pr[s / 2][..]);
        let done = history.len() - lens[s];
        want[s].tokens.iter().skip(done).take(max).copied().collect()
    })
    .adaptive(false);
    let (got, stats) = tree.generate_speculative(&prompts, &params, &mut spec).unwrap();
    assert_same(&want, &got, &stats);
    assert!(stats.accepted > 0 && stats.accepted == stats.drafted, "{stats:?}");
    assert!(stats.steps < stats.tokens / 4, "{stats:?}");
    // the same Speculative twice
    let (again, _) = tree.generate_speculative(&prompts, &params, &mut spec).unwrap();
    assert_eq!(again, want);
}

#[test]
fn speculative_drafter_errors_and_panics() {
    use clade::{Prompt, Speculative};
    let m = small_model();
    let (pr, params) = spec_setup();
    let prompts: Vec<Prompt> = pr.iter().map(|p| Prompt::new(p)).collect();
    let tree = f32_tree(&m);
    let want = tree.generate(&prompts, &params).unwrap();
    let nv = m.n_vocab() as Token;
    let check_usable = || {
        assert_eq!(tree.children(ROOT).unwrap(), Vec::<clade::NodeId>::new());
        let (got, _) = tree.generate_speculative(&prompts, &params, &mut Speculative::lookup(2)).unwrap();
        assert_eq!(got, want);
    };
    let cases: Vec<(Speculative, ErrorKind)> = vec![
        (Speculative::drafter(|_, _, _| vec![nv]).adaptive(false), ErrorKind::Token),
        (Speculative::drafter(|_, _, _| vec![1, -5]).adaptive(false), ErrorKind::Token),
        (Speculative::drafter(|_, _, max| vec![1; max + 1]).adaptive(false), ErrorKind::InvalidArg),
        (Speculative::lookup(2).max_draft(0), ErrorKind::InvalidArg),
        (Speculative::lookup(65), ErrorKind::InvalidArg),
        (Speculative::lookup(0), ErrorKind::InvalidArg), // no drafter
    ];
    for (mut spec, kind) in cases {
        let e = tree.generate_speculative(&prompts, &params, &mut spec).unwrap_err();
        assert_eq!(e.kind, kind, "{spec:?}: {e}");
        check_usable();
    }
    let other = Model::load_with(random_model("spec-vocab.gguf", &["--vocab", "301"]),
                                 &ModelParams { n_threads: 1, ..ModelParams::default() })
        .unwrap();
    let e = tree.generate_speculative(&prompts, &params, &mut Speculative::draft_model(&other)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArg); // another vocabulary
    // a panic stops the call, is resumed after it, and leaves the tree usable
    let mut calls = 0;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut spec = Speculative::drafter(|_, _, _| {
            calls += 1;
            if calls == 3 {
                panic!("drafter boom");
            }
            Vec::new()
        })
        .adaptive(false); // (adaptive may measure that drafting does not pay, and not call it)
        tree.generate_speculative(&prompts, &params, &mut spec)
    }));
    assert_eq!(*caught.unwrap_err().downcast::<&str>().unwrap(), "drafter boom");
    assert_eq!(calls, 3);
    check_usable();
}

// ---- token trees (clade 1.2) -----------------------------------------------------------------

#[test]
fn speculative_tree_width_equals_greedy() {
    use clade::{Prompt, Speculative};
    let m = small_model();
    let (pr, params) = spec_setup();
    let prompts: Vec<Prompt> = pr.iter().map(|p| Prompt::new(p)).collect();
    let tree = f32_tree(&m);
    let want = tree.generate(&prompts, &params).unwrap();
    assert_eq!(Speculative::lookup(3).tree_width, 1); // the library's default
    let draft = Model::load_with(random_model("small-draft.gguf", &["--vocab", "300", "--layers", "1", "--seed", "11"]),
                                 &ModelParams { n_threads: 1, ..ModelParams::default() })
        .unwrap();
    for adaptive in [true, false] {
        for width in [2, 3] {
            // (the random draft model's drafts are hardly ever accepted)
            for (spec, accepts) in [(Speculative::lookup(3), true), (Speculative::draft_model(&draft), false),
                                    (Speculative::draft_model(&m), true)] {
                let mut spec = spec.max_draft(6).adaptive(adaptive).tree_width(width);
                let (got, stats) = tree.generate_speculative(&prompts, &params, &mut spec).unwrap();
                assert_same(&want, &got, &stats);
                if accepts && !adaptive {
                    assert!(stats.accepted > 0, "{spec:?}: {stats:?}");
                }
            }
        }
    }
    assert_eq!(tree.children(ROOT).unwrap(), Vec::<clade::NodeId>::new());
}

#[test]
fn speculative_tree_drafter() {
    use clade::{Prompt, Speculative};
    let m = small_model();
    let (pr, params) = spec_setup();
    let prompts: Vec<Prompt> = pr.iter().map(|p| Prompt::new(p)).collect();
    let tree = f32_tree(&m);
    let want = tree.generate(&prompts, &params).unwrap();
    let lens: Vec<usize> = (0..4).map(|s| pr[s / 2].len()).collect();
    let nv = m.n_vocab() as Token;
    for width in [2, 8] {
        // a wrong token, then the right one beside it (two siblings under
        // the pending token) and the right chain under that
        let mut trees = 0u64;
        let mut spec = Speculative::tree_drafter(|seq, history: &[Token], max| {
            let s = seq as usize;
            let done = history.len() - lens[s];
            let right: Vec<Token> = want[s].tokens.iter().skip(done).take(max - 1).copied().collect();
            if right.is_empty() {
                return (Vec::new(), None);
            }
            trees += 1;
            let mut tokens = vec![(right[0] + 1) % nv];
            tokens.extend(&right);
            let parents = [-1, -1].into_iter().chain(1..right.len() as i32).collect();
            (tokens, Some(parents))
        })
        .tree_width(width)
        .adaptive(false);
        let (got, stats) = tree.generate_speculative(&prompts, &params, &mut spec).unwrap();
        drop(spec);
        assert_same(&want, &got, &stats);
        assert!(stats.accepted > 0 && stats.steps < stats.tokens / 4, "{stats:?}");
        // every node but the wrong sibling accepted
        assert_eq!(stats.drafted - stats.accepted, trees, "{stats:?}");
    }
    // a fixed tree; a chain as parents or None with tree_width 1
    let answers: [(Vec<Token>, Option<Vec<i32>>, i32); 3] =
        [(vec![3, 4, 5, 6], Some(vec![-1, -1, 0, 1]), 2), (vec![3, 4], Some(vec![-1, 0]), 1), (vec![3, 4], None, 1)];
    for (tokens, parents, width) in answers {
        let mut spec = Speculative::tree_drafter(|_, _, max| {
            if max >= tokens.len() { (tokens.clone(), parents.clone()) } else { (Vec::new(), None) }
        })
        .tree_width(width)
        .adaptive(false);
        let (got, stats) = tree.generate_speculative(&prompts, &params, &mut spec).unwrap();
        assert_same(&want, &got, &stats);
        assert!(stats.drafted > 0, "{stats:?}");
    }
    assert_eq!(tree.children(ROOT).unwrap(), Vec::<clade::NodeId>::new());
}

#[test]
fn speculative_tree_drafter_errors() {
    use clade::{Prompt, Speculative};
    let m = small_model();
    let (pr, params) = spec_setup();
    let prompts: Vec<Prompt> = pr.iter().map(|p| Prompt::new(p)).collect();
    let tree = f32_tree(&m);
    let want = tree.generate(&prompts, &params).unwrap();
    let cases: [(&[Token], &[i32], i32); 6] = [
        (&[3, 4], &[0, -1], 2), // a parent not before its child
        (&[3, 4], &[-1, 7], 2),
        (&[3, 4], &[-1, -2], 2),
        (&[3, 4, 5], &[-1, -1, -1], 2), // too many children
        (&[3, 4], &[-1, -1], 1),        // a tree with tree_width 1
        (&[3, 4], &[-1], 2),            // one parent per token
    ];
    for (tokens, parents, width) in cases {
        let mut spec = Speculative::tree_drafter(|_, _, _| (tokens.to_vec(), Some(parents.to_vec())))
            .tree_width(width)
            .adaptive(false);
        let e = tree.generate_speculative(&prompts, &params, &mut spec).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArg, "{parents:?}: {e}");
        assert_eq!(tree.children(ROOT).unwrap(), Vec::<clade::NodeId>::new());
    }
    for width in [0, 9] {
        let e = tree.generate_speculative(&prompts, &params, &mut Speculative::lookup(2).tree_width(width)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArg);
    }
    let (got, _) = tree.generate_speculative(&prompts, &params, &mut Speculative::lookup(2).tree_width(2)).unwrap();
    assert_eq!(got, want);
}

// ---- prefix reuse and saved sessions (clade 1.3) --------------------------------------------

#[test]
fn prefix_reuse_and_sessions() {
    let m = small_model();
    let doc: Vec<Token> = (0..40).map(|i| (7 * i + 3) % 300).collect();
    let tree = Tree::new(&m, TreeParams { kv_type: KvType::F32, flags: clade::TREE_PREFIX_CACHE, ..TreeParams::default() })
        .unwrap();
    let mut first = doc.clone();
    first.extend([5, 6]);
    let (a, reused, _) = tree.append_prefix(&first).unwrap();
    assert_eq!(reused, 0);
    // another ending after 30 tokens: a split, 30 reused, a fresh tree's logits
    let mut second = doc[..30].to_vec();
    second.push(9);
    let (b, reused, got) = tree.append_prefix(&second).unwrap();
    assert_eq!(reused, 30);
    let (_, want) = f32_tree(&m).append_logits(0, &second).unwrap();
    assert_close(&got, &want, 1e-4);
    tree.release(b).unwrap();
    assert!(tree.trim(0).unwrap() > 0); // b was cached
    let path = tmp_dir().join("rust-session.clade");
    tree.save(a, &path).unwrap();
    // loaded into another tree, the next step equals a fresh evaluation
    let t2 = f32_tree(&m);
    let (node, n, reused) = t2.load(&path).unwrap();
    assert_eq!((n, reused), (42, 0));
    let mut c = cache(&t2, 2, 16);
    let s = c.add(node, &[], false).unwrap();
    let row = one(&mut c, s, &[11]).unwrap();
    let mut hist = first.clone();
    hist.push(11);
    let (_, want) = f32_tree(&m).append_logits(0, &hist).unwrap();
    assert_close(&row, &want, 1e-4);
    // a sequence saved and loaded: its history comes back
    let seq_path = tmp_dir().join("rust-seq.clade");
    c.save(s, &seq_path).unwrap();
    assert_eq!(f32_tree(&m).load(&seq_path).unwrap().1, 43);
    // an F16 tree refuses the F32 file; a missing file is Io
    let t16 = Tree::new(&m, TreeParams::default()).unwrap();
    assert_eq!(t16.load(&path).unwrap_err().kind, ErrorKind::Mismatch);
    assert_eq!(t16.load(tmp_dir().join("missing.clade")).unwrap_err().kind, ErrorKind::Io);
}
