package sandboxsock

// OpenConns is how many connections id's socket holds open now (its limit's places taken).
func OpenConns(s *Set, id ID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ln, ok := s.listeners[id].(*limitListener)
	if !ok {
		return -1
	}
	return len(ln.sem)
}
