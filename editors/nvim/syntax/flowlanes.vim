" The :FlowLanes buffer: a run header, then one line per lane.
if exists("b:current_syntax") | finish | endif
syntax match flowlanesHeader /^\S.*$/
syntax keyword flowlanesDone done merged
syntax keyword flowlanesActive active running
syntax keyword flowlanesFailed failed halted interrupted
syntax keyword flowlanesWaiting waiting paused cancelled planned
highlight default link flowlanesHeader Title
highlight default link flowlanesDone DiagnosticOk
highlight default link flowlanesActive DiagnosticInfo
highlight default link flowlanesFailed DiagnosticError
highlight default link flowlanesWaiting DiagnosticWarn
let b:current_syntax = "flowlanes"
