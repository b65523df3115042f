# flowd-reaper <parent pid> -- <program path> [args...]: flowd/agents/reaper.py's job without a
# Python start (flowd/agents/reaper_native.py). Sets SIGTERM, SIGINT, SIGHUP and SIGCHLD to
# their defaults, blocks them and takes them with rt_sigtimedwait; prctl(PR_SET_PDEATHSIG, SIGTERM) and
# prctl(PR_SET_CHILD_SUBREAPER, 1); if its parent is no longer <parent pid>, stops at once. Forks
# the program (the child gets the signal mask back and execve's it with the same environment;
# 127 and one line on stderr when it cannot). When the program ends, everything still below the
# reaper is killed and it exits with the program's status (128 + the signal when one killed it).
# On SIGTERM/SIGINT/SIGHUP: SIGTERM to the program, up to 2 s for it to end, then everything
# below is killed; exit 128 + the signal. "Everything below": the pids in
# /proc/thread-self/children (a subreaper's orphans come there), each SIGKILLed (only numbers the
# file ends with a space: never a pid cut by a short read), reaped, again until none is left
# (64 rounds of 10 ms at most).
    .globl _start
    .text
    .set FRAME, 4160            # 0 set, 8 old set, 16 status, 24 timespec (sec, nsec), 64 buffer
_start:
    mov (%rsp), %r13            # argc
    lea 8(%rsp), %r15           # argv
    lea 8(%r15,%r13,8), %rbx    # envp
    cmp $4, %r13
    jl usage
    mov 16(%r15), %rsi          # argv[2]: "--"
    cmpw $0x2d2d, (%rsi)
    jne usage
    cmpb $0, 2(%rsi)
    jne usage
    mov 8(%r15), %rsi           # argv[1]: the parent's pid, in decimal
    call atoi
    mov %eax, %r12d
    sub $FRAME, %rsp
    mov %rsp, %r13              # the frame
    movq $0x14003, (%r13)       # SIGHUP, SIGINT, SIGTERM, SIGCHLD
    mov $14, %eax               # rt_sigprocmask(SIG_BLOCK, set, old, 8)
    xor %edi, %edi
    mov %r13, %rsi
    lea 8(%r13), %rdx
    mov $8, %r10d
    syscall
    movq $0, 24(%r13)           # a sigaction: SIG_DFL, no flags, no restorer, empty mask
    movq $0, 32(%r13)
    movq $0, 40(%r13)
    movq $0, 48(%r13)
    mov $1, %edi                # SIGHUP, SIGINT, SIGTERM, SIGCHLD to their defaults: an ignored
    call dfl                    # one inherited through exec would never reach rt_sigtimedwait
    mov $2, %edi
    call dfl
    mov $15, %edi
    call dfl
    mov $17, %edi
    call dfl
    mov $1, %edi                # prctl(PR_SET_PDEATHSIG, SIGTERM)
    mov $15, %esi
    call prctl
    mov $36, %edi               # prctl(PR_SET_CHILD_SUBREAPER, 1)
    mov $1, %esi
    call prctl
    xor %r14d, %r14d            # the program's pid (0: not started)
    mov $15, %ebp               # the signal a stop exits with
    mov $110, %eax              # getppid
    syscall
    cmp %r12d, %eax
    jne stop                    # flowd died before the request took hold
    mov $57, %eax               # fork
    syscall
    test %rax, %rax
    js nostart
    jz child
    mov %rax, %r14
wait:
    mov $128, %eax              # rt_sigtimedwait(set, NULL, NULL, 8)
    mov %r13, %rdi
    xor %esi, %esi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    cmp $17, %eax               # SIGCHLD
    je reap
    test %rax, %rax
    js wait                     # EINTR
    mov %eax, %ebp
    jmp stop
reap:
    mov $61, %eax               # wait4(-1, &status, WNOHANG, NULL): orphans that end, and the program
    mov $-1, %rdi
    lea 16(%r13), %rsi
    mov $1, %edx
    xor %r10d, %r10d
    syscall
    test %rax, %rax
    jle wait
    cmp %r14, %rax
    jne reap
    call below                  # what the program left running ends with it
    mov 16(%r13), %eax
    mov %eax, %edi
    and $0x7f, %edi             # the signal that killed it
    jz 1f
    add $128, %edi
    jmp out
1:  shr $8, %eax                # its exit code
    movzbl %al, %edi
    jmp out

child:
    mov $14, %eax               # rt_sigprocmask(SIG_SETMASK, old, NULL, 8)
    mov $2, %edi
    lea 8(%r13), %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    mov 24(%r15), %rdi          # argv[3]: the program's path
    lea 24(%r15), %rsi          # its argv
    mov %rbx, %rdx              # envp
    mov $59, %eax               # execve
    syscall
nostart:
    lea cannot(%rip), %rsi
    mov $cannotlen, %edx
    call say
    mov 24(%r15), %rsi
    call strlen
    call say
    lea nl(%rip), %rsi
    mov $1, %edx
    call say
    mov $127, %edi
    jmp out

stop:                           # %ebp: the signal; %r14: the program (0: none)
    test %r14, %r14
    jz 2f
    mov $62, %eax               # kill(program, SIGTERM)
    mov %r14, %rdi
    mov $15, %esi
    syscall
    mov $40, %r12d              # 40 x 50 ms
1:  mov $61, %eax               # wait4(program, &status, WNOHANG, NULL)
    mov %r14, %rdi
    lea 16(%r13), %rsi
    mov $1, %edx
    xor %r10d, %r10d
    syscall
    test %rax, %rax
    jnz 2f                      # it ended (or is no child any more)
    mov $50000000, %eax
    call nap
    dec %r12d
    jnz 1b
2:  call below
    lea 128(%rbp), %edi
    jmp out

usage:
    lea usagemsg(%rip), %rsi
    mov $usagelen, %edx
    call say
    mov $2, %edi
out:
    mov $60, %eax               # exit
    syscall

below:                          # SIGKILL everything below the reaper, generation by generation
    push %r12
    push %rbx
    mov $64, %r12d              # rounds
3:  mov $2, %eax                # open("/proc/thread-self/children", O_RDONLY)
    lea children(%rip), %rdi
    xor %esi, %esi
    syscall
    test %rax, %rax
    js 8f                       # no such file: nothing more can be found
    mov %rax, %rdi
    xor %eax, %eax              # read(fd, buffer, 4095)
    lea 64(%r13), %rsi
    mov $4095, %edx
    syscall
    mov %rax, %rbx              # bytes read
    mov $3, %eax                # close(fd)
    syscall
    test %rbx, %rbx
    jle 8f                      # no child left
    lea 64(%r13), %rsi          # parse "pid pid ... ", kill each whole number
    lea (%rsi,%rbx), %r8        # end
    xor %eax, %eax
4:  cmp %r8, %rsi
    jge 6f
    movzbl (%rsi), %ecx
    inc %rsi
    cmp $32, %ecx               # a space ends a number
    je 5f
    sub $48, %ecx
    cmp $9, %ecx
    ja 6f                       # not a digit: stop here
    imul $10, %rax, %rax
    add %rcx, %rax
    jmp 4b
5:  cmp $1, %rax
    jle 7f
    push %rsi
    push %rax
    mov %rax, %rdi
    mov $62, %eax               # kill(pid, SIGKILL)
    mov $9, %esi
    syscall
    pop %rax
    pop %rsi
7:  xor %eax, %eax
    jmp 4b
6:  call reapall
    mov $10000000, %eax
    call nap
    dec %r12d
    jnz 3b
8:  call reapall
    pop %rbx
    pop %r12
    ret

reapall:                        # wait4(-1, NULL, WNOHANG, NULL) until nothing more has ended
    mov $61, %eax
    mov $-1, %rdi
    xor %esi, %esi
    mov $1, %edx
    xor %r10d, %r10d
    syscall
    test %rax, %rax
    jg reapall
    ret

nap:                            # nanosleep for %eax nanoseconds
    movq $0, 24(%r13)
    mov %rax, 32(%r13)
    mov $35, %eax
    lea 24(%r13), %rdi
    xor %esi, %esi
    syscall
    ret

dfl:                            # rt_sigaction(%edi, the sigaction at 24(frame), NULL, 8)
    mov $13, %eax
    lea 24(%r13), %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    ret

prctl:                          # prctl(%edi, %esi, 0, 0, 0)
    mov $157, %eax
    xor %edx, %edx
    xor %r10d, %r10d
    xor %r8d, %r8d
    syscall
    ret

say:                            # write(2, %rsi, %rdx)
    mov $1, %eax
    mov $2, %edi
    syscall
    ret

strlen:                         # %rsi: a string -> %rdx: its length
    xor %edx, %edx
1:  cmpb $0, (%rsi,%rdx)
    je 2f
    inc %rdx
    jmp 1b
2:  ret

atoi:                           # %rsi: decimal digits -> %eax
    xor %eax, %eax
1:  movzbl (%rsi), %ecx
    test %cl, %cl
    jz 2f
    sub $48, %ecx
    imul $10, %eax, %eax
    add %ecx, %eax
    inc %rsi
    jmp 1b
2:  ret

cannot: .ascii "flowd-reaper: cannot start "
    .set cannotlen, . - cannot
nl: .ascii "\n"
usagemsg: .ascii "usage: flowd-reaper <parent pid> -- <program> [args...]\n"
    .set usagelen, . - usagemsg
children: .asciz "/proc/thread-self/children"
