//! YAML input cut into documents on one thread and parsed ahead on several, handed back
//! in input order. Parsing is most of the work of a caller that edits each document, and
//! each document parses on its own, so it spreads over the cores while the caller edits
//! and writes.
//!
//! Documents travel in batches of about `BATCH_BYTES`: a hand-over between threads
//! costs a wake-up (a system call) each way, and a manifest can hold tens of thousands
//! of small documents. What the caller is done with goes back to the thread that
//! parsed it, a batch at a time, to be freed there: freeing costs about as much as
//! building, and the caller is the busier thread.

use std::io::BufRead;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::thread::Scope;

use super::node::Node;
use super::paths::Paths;
use super::read::{Document, ReadError, read_documents, read_documents_with_layouts};
use super::split::{InputError, YamlChunks};

/// One piece of the input: its first line, its text (which the documents' layouts point
/// into) and its documents, or why it could not be read (the last item then).
pub type Parsed = Result<Piece, InputError>;

/// A piece of the input, parsed.
#[derive(Debug)]
pub struct Piece {
    pub first_line: usize,
    pub text: String,
    pub documents: Result<Vec<Document>, ReadError>,
}

/// What the caller wants of each piece.
#[derive(Clone, Copy)]
pub enum Reading {
    /// Its documents' values: the text is reused as soon as it is parsed (`Piece::text`
    /// is empty).
    Values,
    /// Its text too, for output that is the text edited: read with the layouts of the
    /// collections on these paths.
    Text(&'static dyn Paths),
}

/// Text per batch: small enough to keep every thread busy, large enough that a batch
/// is many documents.
const BATCH_BYTES: usize = 64 * 1024;

/// A parsing thread's work, in the order it arrives.
enum Work {
    /// Pieces cut from the input (first line and text), an input error last.
    Parse(Vec<Result<(usize, String), InputError>>),
    /// No more pieces: the thread closes its output, so that the caller sees the end,
    /// and goes on freeing until the caller is done.
    End,
    Free(Vec<Node>),
}

/// Parsing threads: one per core, up to a few.
pub fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from).clamp(1, 4)
}

/// The parsed pieces, in input order.
pub struct InOrder {
    outputs: Vec<Receiver<Vec<Parsed>>>,
    /// Each parsing thread's work queue, for what is to be freed.
    queues: Vec<Sender<Work>>,
    /// One token back per batch received: the cutting thread may cut one more.
    slots: Receiver<()>,
    /// Batches received so far; the current one came from thread (batches - 1) % n.
    batches: usize,
    current: std::vec::IntoIter<Parsed>,
    /// Trees of the current batch the caller is done with.
    done: Vec<Node>,
    /// Texts the caller is done with go back to the cutting thread, to be cut into again.
    recycle: SyncSender<String>,
    ended: bool,
}

impl Iterator for InOrder {
    type Item = Parsed;

    fn next(&mut self) -> Option<Parsed> {
        loop {
            if let Some(piece) = self.current.next() {
                return Some(piece);
            }
            if self.ended {
                return None;
            }
            self.send_done();
            // Batch i went to thread i % n, so it comes back from there; a closed
            // channel means there is no batch i, nor any after it.
            match self.outputs[self.batches % self.outputs.len()].recv() {
                Ok(batch) => {
                    self.batches += 1;
                    let _ = self.slots.try_recv();
                    self.current = batch.into_iter();
                }
                Err(_) => self.ended = true,
            }
        }
    }
}

impl InOrder {
    /// A tree of the last piece, done with: it is freed by the thread that built it.
    pub fn free(&mut self, tree: Node) {
        self.done.push(tree);
    }

    /// The text of a piece, done with: it goes back to be cut into again (or, once the
    /// input is all cut, is freed).
    pub fn free_text(&mut self, text: String) {
        if text.capacity() > 0 {
            let _ = self.recycle.try_send(text);
        }
    }

    fn send_done(&mut self) {
        if self.done.is_empty() || self.batches == 0 {
            return;
        }
        let thread = (self.batches - 1) % self.queues.len();
        // A thread that is gone (it cannot be while this lives) hands the trees back
        // in the error, and they are freed here.
        let _ = self.queues[thread].send(Work::Free(std::mem::take(&mut self.done)));
    }
}

impl Drop for InOrder {
    fn drop(&mut self) {
        self.send_done();
    }
}

/// Starts the cutting thread and `workers` parsing threads in `scope`. They stop at the
/// end of the input, after an input error, or when the `InOrder` is dropped.
pub fn parse_ahead<'scope, R: BufRead + Send + 'scope>(
    scope: &'scope Scope<'scope, '_>,
    input: R,
    workers: usize,
    reading: Reading,
) -> InOrder {
    let workers = workers.max(1);
    // The work queues are unbounded so that handing trees back never waits (the
    // thread waited for could be waiting for the caller). The batches in flight are
    // bounded instead: the cutting thread takes a slot for each batch it cuts, the
    // caller frees one for each it receives.
    let (slot_tx, slot_rx) = sync_channel::<()>(2 * workers);
    // Texts go back to the cutting thread to be reused: a fresh buffer per document
    // costs an allocation (and its growth) each time.
    let (recycle_tx, recycle_rx) = sync_channel::<String>(1024);
    let mut queues = Vec::new();
    let mut outputs = Vec::new();
    for _ in 0..workers {
        let (work_tx, work_rx) = channel::<Work>();
        let (out_tx, out_rx) = channel::<Vec<Parsed>>();
        let recycle = recycle_tx.clone();
        scope.spawn(move || parse_and_free(work_rx, out_tx, reading, recycle));
        queues.push(work_tx);
        outputs.push(out_rx);
    }
    let jobs: Vec<Sender<Work>> = queues.clone();
    scope.spawn(move || cut(input, &jobs, slot_tx, recycle_rx));
    InOrder {
        outputs,
        queues,
        slots: slot_rx,
        batches: 0,
        current: Vec::new().into_iter(),
        done: Vec::new(),
        recycle: recycle_tx,
        ended: false,
    }
}

fn cut<R: BufRead>(input: R, jobs: &[Sender<Work>], slots: SyncSender<()>, recycle: Receiver<String>) {
    let mut chunks = YamlChunks::new(input);
    let mut at_end = false;
    for index in 0.. {
        // A closed slot channel: the caller stopped (an output error).
        if at_end || slots.send(()).is_err() {
            break;
        }
        let mut batch = Vec::new();
        let mut bytes = 0;
        while bytes < BATCH_BYTES {
            let mut text = recycle.try_recv().unwrap_or_default();
            match chunks.read_chunk(&mut text) {
                Ok(None) => {
                    at_end = true;
                    break;
                }
                Ok(Some(first_line)) => {
                    bytes += text.len();
                    batch.push(Ok((first_line, text)));
                }
                Err(e) => {
                    batch.push(Err(e));
                    at_end = true;
                    break;
                }
            }
        }
        if !batch.is_empty() && jobs[index % jobs.len()].send(Work::Parse(batch)).is_err() {
            break;
        }
    }
    for queue in jobs {
        let _ = queue.send(Work::End);
    }
}

/// One parsing thread: it ends when both the cutting thread and the caller are done
/// with it (every sender of its queue is gone).
fn parse_and_free(work: Receiver<Work>, out: Sender<Vec<Parsed>>, reading: Reading, recycle: SyncSender<String>) {
    let mut out = Some(out);
    for item in work {
        match item {
            Work::Free(trees) => drop(trees),
            Work::End => out = None,
            Work::Parse(batch) => {
                let Some(sender) = &out else { continue };
                let parsed = batch
                    .into_iter()
                    .map(|job| job.map(|(first_line, text)| parse_piece(first_line, text, reading, &recycle)))
                    .collect();
                // A closed channel: the caller stopped (an output error).
                if sender.send(parsed).is_err() {
                    out = None;
                }
            }
        }
    }
}

/// One piece parsed.
fn parse_piece(first_line: usize, mut text: String, reading: Reading, recycle: &SyncSender<String>) -> Piece {
    let documents = match reading {
        Reading::Values => read_documents(&text, first_line),
        Reading::Text(paths) => read_documents_with_layouts(&text, first_line, paths),
    };
    match reading {
        Reading::Values => {
            let _ = recycle.try_send(std::mem::take(&mut text));
        }
        Reading::Text(_) => text = kept(text),
    }
    Piece {
        first_line,
        text,
        documents,
    }
}

/// A text kept for the output: a large one (a List) at its size, not at the doubled
/// capacity it grew to.
fn kept(mut text: String) -> String {
    if text.len() >= 1 << 20 && text.capacity() - text.len() > text.len() / 8 {
        text.shrink_to_fit();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str, workers: usize) -> Vec<String> {
        std::thread::scope(|scope| {
            let mut parsed = parse_ahead(scope, text.as_bytes(), workers, Reading::Values);
            let mut names = Vec::new();
            while let Some(piece) = parsed.next() {
                for document in piece.unwrap().documents.unwrap() {
                    let Some(root) = document.root else { continue };
                    names.push(
                        root.get("name")
                            .and_then(|n| n.as_str())
                            .unwrap_or_default()
                            .to_string(),
                    );
                    parsed.free(root);
                }
            }
            names
        })
    }

    #[test]
    fn documents_come_back_in_input_order_whatever_the_workers() {
        let text: String = (0..300).map(|i| format!("---\nname: d{i}\n")).collect();
        let want: Vec<String> = (0..300).map(|i| format!("d{i}")).collect();
        for workers in [1, 2, 3, 4] {
            assert_eq!(names(&text, workers), want, "{workers} workers");
        }
    }

    #[test]
    fn an_input_error_comes_last_in_its_place() {
        let bytes: &[u8] = b"name: a\n---\nname: b\n---\nname: \xff\n---\nname: c\n";
        let got: Vec<Parsed> = std::thread::scope(|scope| parse_ahead(scope, bytes, 2, Reading::Values).collect());
        assert_eq!(got.len(), 3);
        assert!(got[0].is_ok() && got[1].is_ok());
        assert_eq!(got[2].as_ref().unwrap_err().line, 5);
    }

    #[test]
    fn a_caller_that_stops_early_stops_every_thread() {
        let text: String = (0..5000).map(|i| format!("---\nname: d{i}\n")).collect();
        std::thread::scope(|scope| {
            let mut parsed = parse_ahead(scope, text.as_bytes(), 2, Reading::Values);
            let documents = parsed.next().unwrap().unwrap().documents.unwrap();
            parsed.free(documents.into_iter().next().unwrap().root.unwrap());
        });
    }

    #[test]
    fn batches_in_flight_are_bounded() {
        let filler = "x".repeat(200);
        let text: String = (0..10_000)
            .map(|i| format!("---\nname: d{i}\ndata: {filler}\n"))
            .collect();
        let mut input = text.as_bytes();
        let counted = std::sync::atomic::AtomicUsize::new(0);
        struct Counting<'a, R>(R, &'a std::sync::atomic::AtomicUsize);
        impl<R: std::io::Read> std::io::Read for Counting<'_, R> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                self.0.read(buf)
            }
        }
        impl<R: BufRead> BufRead for Counting<'_, R> {
            fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
                self.0.fill_buf()
            }
            fn consume(&mut self, amount: usize) {
                self.1.fetch_add(amount, std::sync::atomic::Ordering::SeqCst);
                self.0.consume(amount);
            }
        }
        std::thread::scope(|scope| {
            let mut parsed = parse_ahead(scope, Counting(&mut input, &counted), 2, Reading::Values);
            assert!(parsed.next().is_some());
            std::thread::sleep(std::time::Duration::from_millis(200));
            // One batch received, four slots taken, the cutting thread into the next:
            // about six batches of the input's 2.2 MB.
            let read = counted.load(std::sync::atomic::Ordering::SeqCst);
            assert!(read < 8 * BATCH_BYTES, "{read} bytes read ahead");
        });
    }
}
