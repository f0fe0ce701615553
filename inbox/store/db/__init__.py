"""Connection machinery: the engine and its deadlines, the claims' own connections, group
commit, and statements bounded by the days they touch."""
