// Placeholder until the arrays layer lands.
namespace cai {}
