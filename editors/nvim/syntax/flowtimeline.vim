" The :FlowGraph timeline buffer: a bar of phase marks per lane, then its phases and times.
if exists("b:current_syntax") | finish | endif
syntax match flowtimelineHeader /\%1l.*$/
syntax match flowtimelineMerged /M\+/
syntax match flowtimelineFailed /X\+/
syntax match flowtimelineCoding /=\+/
highlight default link flowtimelineHeader Title
highlight default link flowtimelineMerged DiagnosticOk
highlight default link flowtimelineFailed DiagnosticError
highlight default link flowtimelineCoding DiagnosticInfo
let b:current_syntax = "flowtimeline"
