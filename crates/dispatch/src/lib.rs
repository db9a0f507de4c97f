//! The dispatcher: acquire a slot, connect, isolate, run the job, release the slot.
