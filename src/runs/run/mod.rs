//! The runs. Each is a type implementing `kit::Run`, reading as a short
//! list of durable steps on the kit's primitives, and imports only the kit.

pub mod check;
pub mod deploy;
pub mod preview;
pub mod probe;
pub mod release;
pub mod schedules;
