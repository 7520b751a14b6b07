// Placeholder until the sync layer lands.
namespace cai::sync {}
