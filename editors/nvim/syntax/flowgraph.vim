" The :FlowGraph buffer: a header, layers of stories (status sign, id, * on the critical path),
" then each story's dependencies. Cells are also highlighted by the plugin (extmarks).
if exists("b:current_syntax") | finish | endif
syntax match flowgraphHeader /\%1l.*$/
syntax match flowgraphLayers /^L1\s.*$/
syntax match flowgraphCriticalLine /^critical path:.*$/
highlight default link flowgraphHeader Title
highlight default link flowgraphLayers Comment
highlight default link flowgraphCriticalLine FlowGraphCritical
highlight default FlowGraphCritical gui=bold,underline cterm=bold,underline guifg=#e5484d ctermfg=red
highlight default link FlowGraphDone DiagnosticOk
highlight default link FlowGraphFailed DiagnosticError
highlight default link FlowGraphActive DiagnosticInfo
highlight default link FlowGraphWaiting DiagnosticWarn
let b:current_syntax = "flowgraph"
